//! The systemd unit is valid for `systemd-analyze verify`. The Kubernetes manifests are checked
//! as rendered, in tests/kustomize.rs.

use std::process::Command;

use crate::support::agent::binary;
use crate::support::repo_root;

#[test]
fn the_systemd_unit_verifies() {
    let unit = std::fs::read_to_string(repo_root().join("deploy/systemd/gpuship.service")).unwrap();
    assert!(
        unit.contains("ExecStart=/usr/local/bin/gpuship run --config /etc/gpuship/gpuship.toml")
    );
    // Verify the unit as installed, with the binary the tests built in place of /usr/local/bin.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gpuship.service");
    std::fs::write(&path, unit.replace("/usr/local/bin/gpuship", binary())).unwrap();
    let output = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .output()
        .expect("systemd-analyze (make testenv installs systemd)");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "{text}");
    assert!(
        !text.lines().any(|l| l.starts_with("gpuship.service")),
        "systemd-analyze complained about the unit:\n{text}"
    );
}
