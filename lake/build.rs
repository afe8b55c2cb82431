//! Sets the commit and build date that `gpuship-lake --version` prints, as the agent's build
//! script does for `gpuship --version` (`../build/version.rs`).

use std::path::PathBuf;

#[path = "../build/version.rs"]
mod version;

fn main() {
    let manifest_dir = PathBuf::from(
        std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"),
    );
    let workspace = manifest_dir
        .parent()
        .expect("lake/ is inside the workspace");
    version::emit_version_info(workspace);
}
