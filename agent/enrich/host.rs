//! The host name and boot id written into every row.

use std::sync::Arc;

use gpuship_sinks::schema::HostIdentity;

const BOOT_ID_PATH: &str = "/proc/sys/kernel/random/boot_id";

/// Environment variable holding the Kubernetes node's name (the downward API's
/// `spec.nodeName`, set by deploy/kubernetes/base/daemonset.yaml): inside a pod `uname` gives the pod's
/// name, not the node's.
pub const NODE_NAME_ENV: &str = "K8S_NODE_NAME";

/// This machine's identity; `host_override` comes from `[agent] host_name`, else
/// `$K8S_NODE_NAME`, else the kernel's node name.
pub fn host_identity(host_override: Option<&str>) -> HostIdentity {
    let node_env = std::env::var(NODE_NAME_ENV).ok();
    let host = pick_host(host_override, node_env.as_deref(), node_name);
    let boot_id = std::fs::read_to_string(BOOT_ID_PATH)
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|err| {
            tracing::warn!(path = BOOT_ID_PATH, %err, "no boot id; rows get an empty one");
            String::new()
        });
    HostIdentity {
        host: Arc::from(host),
        boot_id: Arc::from(boot_id),
    }
}

/// The machine id (`/etc/machine-id`, the OpenTelemetry `host.id`), when the system has one.
pub fn machine_id() -> Option<String> {
    let id = std::fs::read_to_string("/etc/machine-id").ok()?;
    let id = id.trim();
    (!id.is_empty()).then(|| id.to_string())
}

/// The host name by precedence: the config's, the Kubernetes node's, the kernel's.
fn pick_host(
    host_override: Option<&str>,
    node_env: Option<&str>,
    uname: impl FnOnce() -> String,
) -> String {
    [host_override, node_env]
        .into_iter()
        .flatten()
        .map(str::trim)
        .find(|name| !name.is_empty())
        .map_or_else(uname, str::to_string)
}

fn node_name() -> String {
    uname().map_or_else(|| "unknown-host".to_string(), |uts| c_field(&uts.nodename))
}

/// The running kernel's release (`uname -r`), e.g. `6.18.44-fc-v769`.
pub fn kernel_release() -> Option<String> {
    uname().map(|uts| c_field(&uts.release))
}

fn uname() -> Option<libc::utsname> {
    // SAFETY: utsname is plain data; zeroed is a valid value and uname only writes into it.
    let mut uts: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: `uts` is a valid, writable utsname.
    (unsafe { libc::uname(&mut uts) } == 0).then_some(uts)
}

fn c_field(chars: &[libc::c_char]) -> String {
    let bytes: Vec<u8> = chars
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_config_wins_then_the_kubernetes_node_then_uname() {
        let uname = || "pod-abc".to_string();
        assert_eq!(pick_host(Some("cfg"), Some("node-7"), uname), "cfg");
        assert_eq!(pick_host(None, Some("node-7"), uname), "node-7");
        assert_eq!(pick_host(None, Some(" "), uname), "pod-abc");
        assert_eq!(pick_host(None, None, uname), "pod-abc");
    }

    #[test]
    fn identity_has_this_hosts_name_and_boot_id() {
        let id = host_identity(None);
        let expected = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
        let expected = std::env::var(NODE_NAME_ENV).unwrap_or(expected);
        assert_eq!(&*id.host, expected.trim());
        assert_eq!(id.boot_id.len(), 36, "{}", id.boot_id);
        assert_eq!(&*host_identity(Some("override")).host, "override");
    }
}
