//! The host-wide checks of `gpuship doctor` (capabilities, BTF, tracefs, lockdown, sinks)
//! around each registered source's own ([`crate::sources::doctor_checks`]).

use std::path::{Path, PathBuf};

use crate::config::Config;
use crate::diagnosis::{lockdown_mode, presence, Cause, Check, HostFacts};
use crate::sources::{self, tracefs};

/// Runs every check for `config`, in the order a person would fix them: what every BPF
/// source needs, each source's probes in registry order, then the sinks.
pub fn run_checks(config: &Config) -> Vec<Check> {
    // Every source that loads BPF programs, the driver's too.
    let bpf = !config.sources.bpf_sources_on().is_empty();
    let tracefs_needed = config.sources.needs_tracefs();
    let mut checks = vec![capabilities(bpf), btf(bpf)];
    let tracefs_root = match tracefs::ensure_mounted() {
        Ok(root) => {
            checks.push(Check::pass(
                "tracefs",
                tracefs_needed,
                format!("mounted at {}", root.display()),
            ));
            Some(root)
        }
        Err(reason) => {
            checks.push(Check::failed_because(
                "tracefs",
                tracefs_needed,
                reason,
                &Cause::TracefsUnmounted,
            ));
            None
        }
    };
    // Read once: several checks tell a lockdown refusal from other failures with it.
    let host = HostFacts {
        tracefs_root,
        lockdown: lockdown_mode(),
        proc_dir: PathBuf::from("/proc"),
    };
    checks.extend(sources::doctor_checks(&config.sources, &host));
    checks.push(lockdown_check(bpf, host.lockdown()));
    checks.extend(sink_checks(config));
    checks
}

/// Each sink's start check and destination health check (informational: a destination that is
/// down at start is an outage the agent rides out).
fn sink_checks(config: &Config) -> Vec<Check> {
    crate::run::check_sinks(config)
        .into_iter()
        .map(|(name, type_name, health)| match health {
            Ok(detail) => Check::pass(format!("sink:{name}"), false, detail),
            Err(problem) => Check::fail(
                format!("sink:{name}"),
                false,
                problem,
                format!("make the {type_name} destination reachable and writable, or fix the sink's settings"),
            ),
        })
        .collect()
}

fn capabilities(required: bool) -> Check {
    let caps = crate::run::effective_capabilities().unwrap_or(0);
    if crate::run::can_trace(caps) {
        Check::pass(
            "capabilities",
            required,
            format!("CAP_BPF+CAP_PERFMON or CAP_SYS_ADMIN present ({caps:#x})"),
        )
    } else {
        Check::failed_because(
            "capabilities",
            required,
            format!("effective capabilities {caps:#x} lack CAP_BPF+CAP_PERFMON and CAP_SYS_ADMIN"),
            &Cause::MissingCapabilities,
        )
    }
}

fn btf(required: bool) -> Check {
    let path = Path::new("/sys/kernel/btf/vmlinux");
    presence(
        "kernel_btf",
        required,
        path,
        "no /sys/kernel/btf/vmlinux",
        &Cause::NoKernelBtf.fix(),
    )
}

fn lockdown_check(required: bool, lockdown: Option<&str>) -> Check {
    match lockdown {
        Some("confidentiality") => Check::failed_because(
            "lockdown",
            required,
            "kernel lockdown is confidentiality: BPF may not read kernel or user memory",
            &Cause::Lockdown("confidentiality".into()),
        ),
        Some("none") => Check::pass("lockdown", required, "mode none"),
        Some(mode) => Check::pass(
            "lockdown",
            required,
            format!("mode {mode}: tracepoints and uprobes work; fentry/fexit on driver functions may be refused"),
        ),
        None => Check::pass("lockdown", required, "no lockdown LSM"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lockdown_confidentiality_fails_with_the_boot_time_fix() {
        let check = lockdown_check(true, Some("confidentiality"));
        assert!(!check.ok);
        let fix = check.fix.unwrap();
        assert!(fix.contains("boot-time setting"), "{fix}");
        assert!(lockdown_check(true, Some("integrity")).ok);
        assert!(lockdown_check(true, None).ok);
    }
}
