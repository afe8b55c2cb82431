//! The systemd units are valid for `systemd-analyze verify`. The Kubernetes manifests are checked
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

/// The compaction job's service and timer (deploy/systemd/gpuship-lake-compact.*) verify
/// together, with the `gpuship-lake` the tests built in place of /usr/local/bin's.
#[test]
fn the_compaction_service_and_timer_verify() {
    let dir = tempfile::tempdir().unwrap();
    let lake = std::path::Path::new(binary()).with_file_name("gpuship-lake");
    let mut paths = Vec::new();
    for name in ["gpuship-lake-compact.service", "gpuship-lake-compact.timer"] {
        let unit = std::fs::read_to_string(repo_root().join("deploy/systemd").join(name)).unwrap();
        let path = dir.path().join(name);
        std::fs::write(
            &path,
            unit.replace("/usr/local/bin/gpuship-lake", &lake.display().to_string()),
        )
        .unwrap();
        paths.push(path);
    }
    let service = std::fs::read_to_string(&paths[0]).unwrap();
    assert!(service.contains("Type=oneshot") && service.contains(" compact --data "));
    let output = Command::new("systemd-analyze")
        .arg("verify")
        .args(&paths)
        .output()
        .expect("systemd-analyze (make testenv installs systemd)");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "{text}");
    assert!(
        !text.lines().any(|l| l.starts_with("gpuship-lake-compact")),
        "systemd-analyze complained about the units:\n{text}"
    );
}
