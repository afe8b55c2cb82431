//! The renderer and the validators of tests/kustomize.rs, from `make testenv`: kubectl (its
//! built-in Kustomize), kubernetes-validate, PyYAML (in the test environment's Python, to
//! read the rendered YAML as JSON) and @kubernetes-models/prometheus-operator (Node.js).

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::Value;

use crate::support::operator_kit::{run, testenv_tool};
use crate::support::repo_root;

/// What `kubectl kustomize` made of a directory: its text and its objects.
pub struct Rendered {
    pub text: String,
    pub objects: Vec<Value>,
}

impl Rendered {
    /// The one object of `kind`.
    pub fn kind(&self, kind: &str) -> &Value {
        let found: Vec<&Value> = self.objects.iter().filter(|o| o["kind"] == kind).collect();
        assert_eq!(found.len(), 1, "one {kind}: {}", self.text);
        found[0]
    }

    pub fn daemonset(&self) -> &Value {
        self.kind("DaemonSet")
    }

    /// The agent's container.
    pub fn container(&self) -> &Value {
        let containers = &self.daemonset()["spec"]["template"]["spec"]["containers"];
        assert_eq!(containers.as_array().map(Vec::len), Some(1), "{containers}");
        &containers[0]
    }
}

/// `kubectl kustomize DIR`.
pub fn render(dir: &Path) -> Rendered {
    let (ok, text) = run(&testenv_tool("bin/kubectl"), &[Path::new("kustomize"), dir]);
    assert!(ok, "kubectl kustomize {}: {text}", dir.display());
    let objects = yaml_to_json(&text);
    Rendered { text, objects }
}

/// deploy/kubernetes/overlays/NAME, rendered.
pub fn overlay(name: &str) -> Rendered {
    render(&repo_root().join("deploy/kubernetes/overlays").join(name))
}

/// An install's own kustomization: `kustomization` (whose paths are relative to a folder two
/// levels under the repository root) rendered from a folder under target/.
pub fn install(kustomization: &str) -> Rendered {
    let dir = tempfile::Builder::new()
        .prefix("kustomize-install")
        .tempdir_in(repo_root().join("target"))
        .expect("tempdir");
    std::fs::write(dir.path().join("kustomization.yaml"), kustomization).unwrap();
    render(dir.path())
}

/// The documents of a YAML stream as JSON values (PyYAML's safe loader; empty documents
/// left out).
pub fn yaml_to_json(yaml: &str) -> Vec<Value> {
    let script = "import json, sys, yaml\n\
                  json.dump([d for d in yaml.safe_load_all(sys.stdin) if d is not None], sys.stdout)";
    let mut child = Command::new(testenv_tool("bin/python3"))
        .args(["-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(yaml.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    match serde_json::from_slice(&output.stdout).expect("JSON") {
        Value::Array(documents) => documents,
        other => panic!("not a list: {other}"),
    }
}

/// `kubernetes-validate --strict` (Kubernetes 1.34's schemas) on a YAML stream.
pub fn kubernetes_validate(yaml: &str) -> (bool, String) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rendered.yaml");
    std::fs::write(&file, yaml).unwrap();
    let validator = testenv_tool("bin/kubernetes-validate");
    run(&validator, &[Path::new("--strict"), &file])
}

/// The script that checks PodMonitors and PrometheusRules against prometheus-operator's CRD
/// schemas (the validators @kubernetes-models generates from them): one line per object,
/// `valid KIND/NAME` or `invalid KIND/NAME: errors`; fails when any is invalid.
const CRD_CHECK: &str = r#"
import { readFileSync } from "node:fs";
import { PodMonitor } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/PodMonitor";
import { PrometheusRule } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/PrometheusRule";
const models = { PodMonitor, PrometheusRule };
let failed = 0;
for (const object of JSON.parse(readFileSync(process.argv[2], "utf8"))) {
  const id = `${object.kind}/${object.metadata.name}`;
  try {
    new models[object.kind](object).validate();
    console.log(`valid ${id}`);
  } catch (err) {
    failed += 1;
    console.log(`invalid ${id}: ${err.message}`);
  }
}
process.exit(failed ? 1 : 0);
"#;

/// Checks `objects` (PodMonitors and PrometheusRules) against prometheus-operator's schemas.
pub fn crd_check(objects: &[Value]) -> (bool, String) {
    testenv_tool("node/node_modules/@kubernetes-models/prometheus-operator/package.json");
    // Inside the environment's folder, so that the package resolves to its node_modules.
    let dir = tempfile::Builder::new()
        .prefix("crd-check")
        .tempdir_in(repo_root().join("target/testenv/node"))
        .expect("tempdir");
    let script = dir.path().join("check.mjs");
    std::fs::write(&script, CRD_CHECK).unwrap();
    let input = dir.path().join("objects.json");
    std::fs::write(&input, serde_json::to_string(objects).unwrap()).unwrap();
    run(Path::new("node"), &[script.as_path(), input.as_path()])
}
