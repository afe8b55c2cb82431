//! Building the stand-in libcuda.so.1 and workload for the benches that drive real probes.

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
