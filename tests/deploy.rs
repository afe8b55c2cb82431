//! The deployment files are valid for the tools that will read them: the systemd unit for
//! `systemd-analyze verify`, the Kubernetes manifest against the API schemas
//! (`kubernetes-validate --strict`), and the agent config inside its ConfigMap for
//! `gpuship validate`.

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

#[test]
fn the_kubernetes_manifest_matches_the_api_schemas() {
    let validator = repo_root().join("target/testenv/bin/kubernetes-validate");
    let output = Command::new(&validator)
        .arg("--strict")
        .arg(repo_root().join("deploy/kubernetes/gpuship.yaml"))
        .output()
        .unwrap_or_else(|e| panic!("{}: {e} (make testenv installs it)", validator.display()));
    let text = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{text}");
    for resource in [
        "namespace/gpuship",
        "configmap/gpuship-config",
        "daemonset/gpuship",
    ] {
        assert!(
            text.contains(&format!("passed for resource {resource}")),
            "{resource}: {text}"
        );
    }
}

#[test]
fn the_config_inside_the_configmap_is_valid() {
    let manifest =
        std::fs::read_to_string(repo_root().join("deploy/kubernetes/gpuship.yaml")).unwrap();
    let mut lines = manifest
        .lines()
        .skip_while(|l| l.trim() != "gpuship.toml: |")
        .skip(1);
    let mut config = String::new();
    for line in lines.by_ref() {
        match line.strip_prefix("    ") {
            Some(text) => config.push_str(&format!("{text}\n")),
            None if line.trim().is_empty() => config.push('\n'),
            None => break,
        }
    }
    assert!(config.contains("[[sinks]]"), "{config}");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gpuship.toml");
    std::fs::write(&path, config).unwrap();
    let output = Command::new(binary())
        .args(["validate", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(String::from_utf8_lossy(&output.stdout).contains("valid (2 sink(s))"));
}
