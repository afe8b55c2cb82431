//! Checks, before anything is started, that the process may load and attach BPF programs, so
//! that a missing capability is one clear message instead of a string of attach failures.

use anyhow::bail;

const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

/// The effective capability set of this process, from /proc/self/status.
pub fn effective_capabilities() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let hex = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))?
        .trim();
    u64::from_str_radix(hex, 16).ok()
}

/// Whether `caps` allow loading tracing BPF programs and attaching probes.
pub fn can_trace(caps: u64) -> bool {
    let has = |cap: u32| caps & (1u64 << cap) != 0;
    (has(CAP_BPF) && has(CAP_PERFMON)) || has(CAP_SYS_ADMIN)
}

/// Fails with instructions when BPF sources are enabled but the process cannot use them;
/// `bpf_sources_on` names each enabled one by the setting that turns it off
/// ([`SourcesConfig::bpf_sources_on`](crate::sources::config::SourcesConfig::bpf_sources_on)).
pub fn check(bpf_sources_on: &[&str]) -> anyhow::Result<()> {
    if bpf_sources_on.is_empty() {
        return Ok(());
    }
    match effective_capabilities() {
        Some(caps) if !can_trace(caps) => bail!(
            "gpuship needs CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN) to load its probes, and this \
             process has neither (effective capabilities {caps:#x}). Run it as root, or grant them \
             (systemd: AmbientCapabilities=CAP_BPF CAP_PERFMON CAP_SYS_ADMIN CAP_SYSLOG), or turn \
             the BPF sources off ({})",
            bpf_sources_on.join(", ")
        ),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg_attr(
        not(feature = "root-tests"),
        ignore = "needs root: `make test` runs it"
    )]
    fn bpf_and_perfmon_or_sys_admin_suffice() {
        assert!(can_trace(1 << CAP_BPF | 1 << CAP_PERFMON));
        assert!(can_trace(1 << CAP_SYS_ADMIN));
        assert!(!can_trace(1 << CAP_BPF));
        assert!(!can_trace(0));
        assert!(check(&[]).is_ok());
        assert!(
            check(&["[sources.cuda] enabled = false"]).is_ok(),
            "the tests run as root"
        );
    }
}
