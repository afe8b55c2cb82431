//! Building the stand-in libcuda.so.1 and workload for the benches that drive real probes, and
//! the agent binary they run.

use std::ffi::OsString;
use std::path::Path;
use std::process::Command;

/// `make -C tests/fixtures OUT=<out>`: `<out>/libcuda.so.1` and `<out>/cuda_workload`.
pub fn build_fixtures(out: &Path) {
    let status = Command::new("make")
        .args([
            "-s",
            "-C",
            concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures"),
        ])
        .arg(format!("OUT={}", out.display()))
        .status()
        .expect("make");
    assert!(status.success(), "building the fixtures failed");
}

/// The agent the benches run: this build's `gpuship`, or `GPUSHIP_AGENT=/path/to/gpuship` (an
/// A/B against another commit's build with the same harness and workload).
pub fn agent_binary() -> OsString {
    std::env::var_os("GPUSHIP_AGENT").unwrap_or_else(|| env!("CARGO_BIN_EXE_gpuship").into())
}
