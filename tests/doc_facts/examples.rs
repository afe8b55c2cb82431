//! The environment of the example configs and of the Kubernetes config: each example's header
//! says which variables (and secret files) it reads, and which of them the DaemonSet sets; the
//! file reads exactly those; `gpuship validate` accepts it with them and refuses it, naming
//! the variable, without each (as `gpuship run` would refuse to start); and every variable the
//! Kubernetes config reads is one the DaemonSet sets.

use std::collections::BTreeSet;
use std::process::{Command, Output};

use super::read;
use crate::support::agent::binary;
use crate::support::repo_root;

/// Marks a header variable the DaemonSet sets (checked against daemonset.yaml).
const SET_BY_DAEMONSET: &str = "(set by the DaemonSet)";

/// `${env:NAME}` and `{ env = "NAME" }` names, and `{ file = "PATH" }` paths (secrets; not
/// `ca_file = "..."`, which is a TLS setting), in `text`, comments included (a commented
/// example line is still documentation).
fn references(text: &str) -> (BTreeSet<String>, BTreeSet<String>) {
    let mut env = BTreeSet::new();
    let mut files = BTreeSet::new();
    for piece in text.split("${env:").skip(1) {
        env.insert(piece[..piece.find('}').expect("closing }")].to_string());
    }
    for (marker, into) in [("{ env = \"", &mut env), ("{ file = \"", &mut files)] {
        for piece in text.split(marker).skip(1) {
            into.insert(piece[..piece.find('"').expect("closing quote")].to_string());
        }
    }
    (env, files)
}

/// The names after `# <label>:` in the header (comma-separated), with their annotations.
fn header_list(text: &str, label: &str) -> Vec<String> {
    text.lines()
        .take_while(|line| line.starts_with('#'))
        .filter_map(|line| line.strip_prefix(&format!("# {label}: ")))
        .flat_map(|list| list.split(", "))
        .map(|item| item.trim().to_string())
        .collect()
}

/// The variables the DaemonSet sets (`- name: X` under its container's `env:`).
fn daemonset_env() -> BTreeSet<String> {
    let manifest = read("deploy/kubernetes/base/daemonset.yaml");
    let env = &manifest[manifest.find("          env:\n").expect("env:")..];
    let env = &env[..env.find("          ports:").expect("ports: after env:")];
    env.lines()
        .filter_map(|line| line.trim().strip_prefix("- name: "))
        .map(str::to_string)
        .collect()
}

/// `gpuship validate --config path` with exactly `env` set (besides PATH), in a private mount
/// namespace whose /run is a fresh tmpfs holding `files` (each with a value).
fn validate(path: &str, env: &[&str], files: &BTreeSet<String>) -> Output {
    let mut script = String::from("mount -t tmpfs tmpfs /run");
    for file in files {
        assert!(
            file.starts_with("/run/"),
            "{path}: secret file {file} not under /run"
        );
        script.push_str(&format!(
            " && mkdir -p \"$(dirname {file})\" && printf s3cret > {file}"
        ));
    }
    script.push_str(" && exec \"$0\" validate --config \"$1\"");
    let mut command = Command::new("unshare");
    command
        .args(["--mount", "--propagation", "private", "sh", "-c", &script])
        .args([binary(), path])
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default());
    for name in env {
        command.env(name, "example-value");
    }
    command.output().expect("unshare (util-linux)")
}

#[test]
fn examples_document_the_environment_they_read_and_validate_needs_it() {
    let daemonset = daemonset_env();
    let mut checked = 0;
    for entry in std::fs::read_dir(repo_root().join("config/examples")).unwrap() {
        let path = entry.unwrap().path();
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(&path).unwrap();
        let (env, files) = references(&text);
        let mut documented = BTreeSet::new();
        for item in header_list(&text, "Environment") {
            let name = match item.strip_suffix(SET_BY_DAEMONSET) {
                Some(name) => {
                    let name = name.trim();
                    assert!(
                        daemonset.contains(name),
                        "{shown}: says the DaemonSet sets {name}; it sets {daemonset:?}"
                    );
                    name
                }
                None => item.as_str(),
            };
            documented.insert(name.to_string());
        }
        assert_eq!(documented, env, "{shown}: `# Environment:` vs the file");
        let documented_files: BTreeSet<String> = header_list(&text, "Files").into_iter().collect();
        assert_eq!(documented_files, files, "{shown}: `# Files:` vs the file");

        let names: Vec<&str> = env.iter().map(String::as_str).collect();
        let out = validate(&shown, &names, &files);
        assert!(
            out.status.success(),
            "{shown} with its documented environment: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        for missing in &names {
            let rest: Vec<&str> = names.iter().copied().filter(|n| n != missing).collect();
            let out = validate(&shown, &rest, &files);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(
                out.status.code(),
                Some(1),
                "{shown} without {missing}: {stderr}"
            );
            assert!(
                stderr.contains(&format!("{missing} is not set"))
                    && stderr.contains("cannot start"),
                "{shown} without {missing}: {stderr}"
            );
        }
        checked += 1;
    }
    assert_eq!(checked, 8, "every example checked");
}

#[test]
fn the_kubernetes_config_reads_only_variables_the_daemonset_sets() {
    let daemonset = daemonset_env();
    let (env, files) = references(&read("deploy/kubernetes/base/gpuship.toml"));
    assert!(
        !env.is_empty(),
        "the config documents its node-name variable"
    );
    for name in &env {
        assert!(
            daemonset.contains(name),
            "deploy/kubernetes/base/gpuship.toml reads {name}; the DaemonSet sets {daemonset:?}"
        );
    }
    assert_eq!(files, BTreeSet::new());
}
