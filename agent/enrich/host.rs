//! The host name and boot id written into every row.

use std::sync::Arc;

use gpuship_sinks::schema::HostIdentity;

const BOOT_ID_PATH: &str = "/proc/sys/kernel/random/boot_id";

/// This machine's identity; `host_override` comes from `[agent] host_name`.
pub fn host_identity(host_override: Option<&str>) -> HostIdentity {
    let host = host_override.map(str::to_string).unwrap_or_else(node_name);
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
    fn identity_has_this_hosts_name_and_boot_id() {
        let id = host_identity(None);
        let expected = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
        assert_eq!(&*id.host, expected.trim());
        assert_eq!(id.boot_id.len(), 36, "{}", id.boot_id);
        assert_eq!(&*host_identity(Some("override")).host, "override");
    }
}
