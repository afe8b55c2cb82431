//! The DaemonSet as the repository ships it, read from its manifests (`deploy/kubernetes/base`,
//! alone or with `components/privileged`, rendered by `kubectl kustomize`) and turned into
//! `podman run` flags that mean what the kubelet would do with it: the host PID namespace,
//! the capabilities it adds to an empty set, the seccomp profile, a read-only root, the memory
//! limit, the hostPath mounts (a temporary folder for the state folder), the ConfigMap's
//! config at its mount path, the downward-API node name.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use super::podman::text;
use crate::support::lake::python;
use crate::support::repo_root;

/// One volume mount of the agent's container.
#[derive(Debug, Clone)]
pub struct Mount {
    /// Where the container sees it.
    pub path: String,
    pub read_only: bool,
    /// `rslave`/`rshared` for HostToContainer/Bidirectional propagation.
    pub propagation: Option<&'static str>,
    pub volume: Volume,
}

#[derive(Debug, Clone)]
pub enum Volume {
    HostPath(PathBuf),
    /// The agent's config (the test writes its own file in its place).
    Config,
    EmptyDir,
}

/// What the test needs of the DaemonSet's pod and agent container.
#[derive(Debug)]
pub struct DaemonSet {
    /// Which manifest it came from.
    pub source: String,
    pub host_pid: bool,
    pub host_network: bool,
    pub privileged: bool,
    /// `capabilities.add`, as written (`CAP_BPF` or `BPF`).
    pub add: Vec<String>,
    pub drop_all: bool,
    pub no_new_privileges: bool,
    pub read_only_root: bool,
    /// `runAsUser[:runAsGroup]`.
    pub user: Option<String>,
    /// `RuntimeDefault`, `Unconfined` or `Localhost` (pod or container level).
    pub seccomp: Option<String>,
    pub mounts: Vec<Mount>,
    pub args: Vec<String>,
    /// Environment (the downward API's node name given as `node_name`).
    pub env: Vec<(String, EnvValue)>,
    /// The metrics port (`containerPort` named `metrics`, else the first).
    pub port: u16,
    /// The paths of its HTTP probes (readiness, liveness, startup).
    pub probes: Vec<String>,
    /// `gpuship.toml` of its ConfigMap.
    pub config: String,
    pub memory_limit: Option<String>,
    pub grace_secs: u64,
}

#[derive(Debug, Clone)]
pub enum EnvValue {
    Literal(String),
    NodeName,
}

/// Which rendering of the manifests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// `deploy/kubernetes/base`: least privilege, as every overlay has it.
    Base,
    /// The base with `components/privileged` (what reading `/dev/kmsg` takes).
    Privileged,
}

/// kubectl of the test environment (`make testenv`), else the one on PATH.
fn kubectl() -> Command {
    let local = repo_root().join("target/testenv/bin/kubectl");
    Command::new(if local.exists() {
        local
    } else {
        "kubectl".into()
    })
}

/// The manifest's documents as JSON: `kubectl kustomize` of the variant.
fn documents(variant: Variant) -> (String, Vec<Value>) {
    // Kustomize takes relative paths only: the install's folder sits two levels below the
    // repository.
    let install = tempfile::Builder::new()
        .prefix("kustomize-")
        .tempdir_in(repo_root().join("target"))
        .unwrap();
    let components = match variant {
        Variant::Base => "",
        Variant::Privileged => "components: [../../deploy/kubernetes/components/privileged]\n",
    };
    std::fs::write(
        install.path().join("kustomization.yaml"),
        format!(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n\
             resources: [../../deploy/kubernetes/base]\n{components}"
        ),
    )
    .unwrap();
    let output = kubectl()
        .arg("kustomize")
        .arg(install.path())
        .output()
        .expect("kubectl (make testenv)");
    assert!(output.status.success(), "{}", text(&output));
    let (source, yaml) = (
        format!("deploy/kubernetes/base ({variant:?})"),
        output.stdout,
    );
    let mut child = Command::new(python())
        .args(["-c", "import json, sys, yaml; print(json.dumps([d for d in yaml.safe_load_all(sys.stdin) if d]))"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python with PyYAML (make testenv)");
    use std::io::Write;
    child.stdin.take().unwrap().write_all(&yaml).unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success(), "YAML of {source} did not parse");
    (source, serde_json::from_slice(&output.stdout).unwrap())
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

impl DaemonSet {
    /// Reads the DaemonSet named `gpuship` and its config.
    pub fn read(variant: Variant) -> DaemonSet {
        let (source, docs) = documents(variant);
        let ds = docs
            .iter()
            .find(|d| d["kind"] == "DaemonSet")
            .unwrap_or_else(|| panic!("no DaemonSet in {source}"));
        let pod = &ds["spec"]["template"]["spec"];
        let containers = pod["containers"].as_array().expect("containers");
        let container = containers
            .iter()
            .find(|c| c["name"] == "gpuship")
            .unwrap_or(&containers[0]);
        let security = &container["securityContext"];
        let mut config = None;
        let mut mounts = Vec::new();
        for mount in container["volumeMounts"].as_array().into_iter().flatten() {
            let volume = pod["volumes"]
                .as_array()
                .and_then(|v| v.iter().find(|v| v["name"] == mount["name"]))
                .unwrap_or_else(|| panic!("no volume {}", mount["name"]));
            let volume = if let Some(path) = volume["hostPath"]["path"].as_str() {
                Volume::HostPath(path.into())
            } else if let Some(name) = volume["configMap"]["name"].as_str() {
                let map = docs
                    .iter()
                    .find(|d| d["kind"] == "ConfigMap" && d["metadata"]["name"] == name)
                    .unwrap_or_else(|| panic!("no ConfigMap {name}"));
                config = map["data"]["gpuship.toml"].as_str().map(String::from);
                Volume::Config
            } else if volume.get("emptyDir").is_some() {
                Volume::EmptyDir
            } else {
                panic!("volume kind the test does not know: {volume}")
            };
            mounts.push(Mount {
                path: mount["mountPath"].as_str().expect("mountPath").into(),
                read_only: mount["readOnly"] == true,
                propagation: match mount["mountPropagation"].as_str() {
                    Some("HostToContainer") => Some("rslave"),
                    Some("Bidirectional") => Some("rshared"),
                    _ => None,
                },
                volume,
            });
        }
        let env = container["env"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|e| {
                let name = e["name"].as_str().unwrap().to_string();
                let value = match (
                    e["value"].as_str(),
                    e["valueFrom"]["fieldRef"]["fieldPath"].as_str(),
                ) {
                    (Some(v), _) => EnvValue::Literal(v.into()),
                    (None, Some("spec.nodeName")) => EnvValue::NodeName,
                    _ => panic!("environment the test does not know: {e}"),
                };
                (name, value)
            })
            .collect();
        let ports = container["ports"].as_array().expect("ports");
        let port = ports
            .iter()
            .find(|p| p["name"] == "metrics")
            .unwrap_or(&ports[0])["containerPort"]
            .as_u64()
            .expect("containerPort") as u16;
        let probes = ["readinessProbe", "livenessProbe", "startupProbe"]
            .iter()
            .filter_map(|p| container[p]["httpGet"]["path"].as_str().map(String::from))
            .collect();
        let user =
            security["runAsUser"]
                .as_u64()
                .map(|uid| match security["runAsGroup"].as_u64() {
                    Some(gid) => format!("{uid}:{gid}"),
                    None => uid.to_string(),
                });
        let seccomp = security["seccompProfile"]["type"]
            .as_str()
            .or(pod["securityContext"]["seccompProfile"]["type"].as_str())
            .map(String::from);
        DaemonSet {
            source,
            host_pid: pod["hostPID"] == true,
            host_network: pod["hostNetwork"] == true,
            privileged: security["privileged"] == true,
            add: strings(&security["capabilities"]["add"]),
            drop_all: strings(&security["capabilities"]["drop"])
                .iter()
                .any(|c| c == "ALL"),
            no_new_privileges: security["allowPrivilegeEscalation"] == false,
            read_only_root: security["readOnlyRootFilesystem"] == true,
            user,
            seccomp,
            mounts,
            args: strings(&container["args"]),
            env,
            port,
            probes,
            config: config.expect("the ConfigMap's gpuship.toml"),
            memory_limit: container["resources"]["limits"]["memory"]
                .as_str()
                .map(String::from),
            grace_secs: pod["terminationGracePeriodSeconds"].as_u64().unwrap_or(30),
        }
    }

    /// The host folder behind a container path, through the mounts (`state` standing in for
    /// the hostPath that holds the config's `state_dir`).
    pub fn host_path(&self, container_path: &str, state: &Path) -> Option<PathBuf> {
        let state_dir = self.state_dir();
        self.mounts
            .iter()
            .filter(|m| container_path.starts_with(&m.path))
            .max_by_key(|m| m.path.len())
            .and_then(|m| {
                let rest = container_path[m.path.len()..].trim_start_matches('/');
                match &m.volume {
                    Volume::HostPath(_) if state_dir.starts_with(&m.path) => Some(state.join(rest)),
                    Volume::HostPath(host) => Some(host.join(rest)),
                    _ => None,
                }
            })
    }

    /// `[agent] state_dir` of the ConfigMap's config.
    pub fn state_dir(&self) -> String {
        self.config
            .lines()
            .find_map(|l| l.trim().strip_prefix("state_dir = "))
            .map(|v| v.trim_matches('"').to_string())
            .expect("the ConfigMap's config names its state_dir")
    }
}
