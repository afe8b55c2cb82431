//! [`DaemonSet`]'s `podman run` flags: each field of the manifest turned into the flag with
//! the kubelet's meaning, and the host folders that stand in for the node's.

use std::path::Path;

use super::daemonset::{DaemonSet, EnvValue, Volume};

/// containerd's capabilities for a container that drops none (`oci.DefaultCaps`).
const CONTAINERD_DEFAULT_CAPS: [&str; 14] = [
    "CHOWN",
    "DAC_OVERRIDE",
    "FSETID",
    "FOWNER",
    "MKNOD",
    "NET_RAW",
    "SETGID",
    "SETUID",
    "SETFCAP",
    "SETPCAP",
    "NET_BIND_SERVICE",
    "SYS_CHROOT",
    "KILL",
    "AUDIT_WRITE",
];

/// Where the test puts what the cluster would provide.
pub struct Host<'a> {
    /// Stands in for the hostPath that holds the state folder.
    pub state: &'a Path,
    /// A folder holding the `gpuship.toml` mounted where the ConfigMap goes.
    pub config: &'a Path,
    /// The downward API's `spec.nodeName`.
    pub node_name: &'a str,
    /// The seccomp profile standing in for the runtime's default (`RuntimeDefault`).
    pub runtime_default_seccomp: &'a Path,
}

impl DaemonSet {
    /// `podman run` flags with the DaemonSet's meaning, and the hostPaths left out because this
    /// machine has no such file (`/proc/driver/nvidia` without a GPU, ...).
    pub fn podman_args(&self, host: &Host) -> (Vec<String>, Vec<String>) {
        let mut args: Vec<String> = Vec::new();
        let mut absent = Vec::new();
        if self.host_pid {
            args.push("--pid=host".into());
        }
        if self.host_network {
            args.push("--network=host".into());
        } else {
            args.push(format!("--publish=127.0.0.1::{}", self.port));
        }
        if self.privileged {
            args.push("--privileged".into());
        } else {
            // The kubelet starts from the runtime's default set unless the manifest drops ALL;
            // podman's default differs from containerd's, so the set is always spelled out.
            args.push("--cap-drop=all".into());
            let defaults = if self.drop_all {
                &[][..]
            } else {
                &CONTAINERD_DEFAULT_CAPS[..]
            };
            for cap in defaults
                .iter()
                .map(|c| c.to_string())
                .chain(self.add.iter().cloned())
            {
                args.push(format!("--cap-add={}", cap.trim_start_matches("CAP_")));
            }
            // Kubernetes runs a pod Unconfined unless it names a profile (or the kubelet runs
            // with --seccomp-default).
            args.push(match self.seccomp.as_deref() {
                Some("RuntimeDefault") => format!(
                    "--security-opt=seccomp={}",
                    host.runtime_default_seccomp.display()
                ),
                None | Some("Unconfined") => "--security-opt=seccomp=unconfined".into(),
                Some(other) => panic!("seccomp profile the test does not know: {other}"),
            });
        }
        if self.no_new_privileges {
            args.push("--security-opt=no-new-privileges".into());
        }
        if self.read_only_root {
            args.extend(["--read-only".into(), "--read-only-tmpfs=false".into()]);
        }
        if let Some(user) = &self.user {
            args.push(format!("--user={user}"));
        }
        if let Some(memory) = &self.memory_limit {
            let bytes = match memory.split_at(memory.len() - 2) {
                (n, "Mi") => n.parse::<u64>().unwrap() << 20,
                (n, "Gi") => n.parse::<u64>().unwrap() << 30,
                _ => memory.parse().expect("a memory limit in bytes, Mi or Gi"),
            };
            args.push(format!("--memory={bytes}"));
        }
        let state_dir = self.state_dir();
        for mount in &self.mounts {
            let source = match &mount.volume {
                Volume::Config => host.config.to_path_buf(),
                Volume::HostPath(_) if state_dir.starts_with(&mount.path) => {
                    host.state.to_path_buf()
                }
                Volume::HostPath(path) if !path.exists() => {
                    absent.push(path.display().to_string());
                    continue;
                }
                Volume::HostPath(path) => path.clone(),
                Volume::EmptyDir => {
                    args.push(format!("--mount=type=tmpfs,destination={}", mount.path));
                    continue;
                }
            };
            let mut options = vec![if mount.read_only { "ro" } else { "rw" }];
            options.extend(mount.propagation);
            args.push(format!(
                "--volume={}:{}:{}",
                source.display(),
                mount.path,
                options.join(",")
            ));
        }
        for (name, value) in &self.env {
            let value = match value {
                EnvValue::Literal(v) => v.as_str(),
                EnvValue::NodeName => host.node_name,
            };
            args.push(format!("--env={name}={value}"));
        }
        (args, absent)
    }
}
