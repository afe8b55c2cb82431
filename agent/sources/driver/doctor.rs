//! The driver-side checks of `gpuship doctor`: the ioctl hook and the driver functions (each
//! tried by loading and attaching), and the kernel settings they depend on (kptr_restrict,
//! kprobes, the nvidia module's BTF).

use std::mem::MaybeUninit;
use std::path::Path;

use super::config::DriverSourceConfig;
use crate::diagnosis::{fixes, presence, refusal_or, Cause, Check, HostFacts};
use crate::sources::driver;

/// The checks of `[sources.driver]` on `host`: the hooks tried, then the kernel settings
/// they depend on.
pub fn checks(driver_config: &DriverSourceConfig, host: &HostFacts) -> Vec<Check> {
    let mut checks = hook_checks(driver_config, host.lockdown());
    checks.push(kprobes(host.tracefs_root.as_deref()));
    checks.push(kptr_restrict());
    checks.push(nvidia_btf());
    checks
}

/// The ioctl hook and every driver function (configured ones required, the built-in candidates
/// informational), each tried by loading and attaching.
fn hook_checks(driver_config: &DriverSourceConfig, lockdown: Option<&str>) -> Vec<Check> {
    let mut checks = Vec::new();
    if driver_config.ioctl {
        // Required only when the majors were named: "auto" on a host without the driver is fine.
        let required = !driver_config.device_majors.is_empty();
        let only_ioctl = DriverSourceConfig {
            functions: Vec::new(),
            ..driver_config.clone()
        };
        let mut storage = MaybeUninit::uninit();
        let detail = |statuses: &[driver::HookStatus]| {
            statuses
                .first()
                .map(|s| s.detail.clone())
                .unwrap_or_default()
        };
        checks.push(match driver::load(&mut storage, &only_ioctl) {
            Ok((Some(_), statuses)) => Check::pass("driver_ioctl", required, detail(&statuses)),
            Ok((None, statuses)) => Check::fail(
                "driver_ioctl",
                required,
                detail(&statuses),
                format!(
                    "{}, or set sources.driver.device_majors",
                    Cause::DriverNotLoaded.fix()
                ),
            ),
            Err(err) => {
                let detail = format!("{err:#}");
                let otherwise = Cause::KernelFeature(
                    "the syscalls:sys_enter_ioctl tracepoints (CONFIG_FTRACE_SYSCALLS) and BTF",
                );
                let cause = refusal_or(&detail, lockdown, otherwise);
                Check::failed_because("driver_ioctl", required, detail, &cause)
            }
        });
    }
    let configured: Vec<&String> = driver_config.functions.iter().collect();
    let candidates = driver::CANDIDATE_FUNCTIONS.iter().filter(|c| {
        !configured
            .iter()
            .any(|f| f.split('|').any(|n| n.trim() == **c))
    });
    let specs: Vec<(String, bool)> = configured
        .iter()
        .map(|spec| ((*spec).clone(), true))
        .chain(candidates.map(|c| (c.to_string(), false)))
        .collect();
    for (spec, required) in specs {
        let probe = format!("driver:{spec}");
        checks.push(match driver::resolve_spec(&spec) {
            Ok(function) => Check::pass(
                probe,
                required,
                format!("fentry/fexit on {function} attach"),
            ),
            Err(reasons) => {
                let fix = fixes(&function_causes(&reasons, lockdown));
                Check::fail(probe, required, reasons, fix)
            }
        });
    }
    checks
}

fn kptr_restrict() -> Check {
    match std::fs::read_to_string("/proc/sys/kernel/kptr_restrict") {
        Ok(value) if value.trim() == "2" => Check::fail(
            "kptr_restrict",
            false,
            "kernel.kptr_restrict = 2: /proc/kallsyms shows no addresses even to root",
            "none needed: only the doctor's explanations use kallsyms; fentry attaches through BTF regardless",
        ),
        Ok(value) => Check::pass(
            "kptr_restrict",
            false,
            format!("kernel.kptr_restrict = {}", value.trim()),
        ),
        Err(err) => Check::pass("kptr_restrict", false, format!("not readable: {err}")),
    }
}

fn kprobes(tracefs_root: Option<&Path>) -> Check {
    let events = tracefs_root.map_or_else(
        || Path::new("/sys/kernel/tracing").join("kprobe_events"),
        |r| r.join("kprobe_events"),
    );
    presence(
        "kprobes",
        false,
        &events,
        "kernel built without CONFIG_KPROBES (no kprobe_events in tracefs)",
        "none needed for XIDs and CUDA calls; driver function hooks need fentry with the nvidia module's BTF instead",
    )
}

fn nvidia_btf() -> Check {
    let (missing, cause) = if Path::new("/sys/module/nvidia").exists() {
        (
            "no /sys/kernel/btf/nvidia: the nvidia module is loaded but was built without BTF",
            Cause::ModuleWithoutBtf,
        )
    } else {
        (
            "no /sys/kernel/btf/nvidia: the nvidia module is not loaded",
            Cause::DriverNotLoaded,
        )
    };
    presence(
        "nvidia_module_btf",
        false,
        Path::new("/sys/kernel/btf/nvidia"),
        missing,
        &format!("{}; only driver function hooks need it", cause.fix()),
    )
}

/// The cause of each alternative of a driver function spec that could not be traced, from
/// the reasons [`driver::resolve_spec`] gives (one per alternative, joined by `; `).
pub fn function_causes(reasons: &str, lockdown: Option<&str>) -> Vec<Cause> {
    let mut causes = Vec::new();
    for reason in reasons.split("; ") {
        let cause = if reason.contains("is not in the kernel or any loaded module") {
            Cause::FunctionAbsent
        } else if reason.contains("cannot be traced") {
            Cause::FunctionNotTraceable
        } else {
            refusal_or(reason, lockdown, Cause::Unknown)
        };
        if !causes.contains(&cause) {
            causes.push(cause);
        }
    }
    causes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lockdown_gets_the_boot_time_fix_never_the_module_one() {
        // What the H100 showed: every alternative refused with EPERM under lockdown.
        let reasons = "the kernel refused to load a tracing program for nv_isr (EPERM): kernel \
                       lockdown (integrity) forbids fentry/fexit; the kernel refused to load a \
                       tracing program for nvidia_isr (EPERM): kernel lockdown (integrity) \
                       forbids fentry/fexit";
        let causes = function_causes(reasons, Some("integrity"));
        assert_eq!(causes, [Cause::Lockdown("integrity".into())]);
        let fix = fixes(&causes);
        assert!(fix.contains("boot-time setting"), "{fix}");
        assert!(fix.contains("lockdown="), "{fix}");
        assert!(fix.contains("Secure Boot"), "{fix}");
        assert!(fix.contains("ioctl tracepoints"), "{fix}");
        assert!(!fix.contains("load the"), "{fix}");
        let strict = Cause::Lockdown("confidentiality".into()).fix();
        assert!(strict.contains("boot-time setting") && strict.contains("lockdown=integrity"));
        assert!(!fix.contains("function"), "{fix}");
    }

    #[test]
    fn each_driver_function_cause_maps_to_its_own_fix() {
        let absent = "nv_foo is not in the kernel or any loaded module (module not loaded, \
                      renamed in this driver version, or inlined)";
        let untraceable = "nv_bar is in /proc/kallsyms but cannot be traced: not \
                           ftrace-instrumented (...) (libbpf error)";
        let policy = "the kernel refused to load a tracing program for nv_baz (EPERM): a \
                      security policy forbids fentry/fexit here";
        assert_eq!(function_causes(absent, None), [Cause::FunctionAbsent]);
        assert_eq!(
            function_causes(untraceable, None),
            [Cause::FunctionNotTraceable]
        );
        assert_eq!(
            function_causes(policy, Some("none")),
            [Cause::SecurityPolicy]
        );
        assert_eq!(function_causes("something new", None), [Cause::Unknown]);
        // Alternatives with different causes: each fix once, in order.
        let both = format!("{absent}; {untraceable}; {absent}");
        let causes = function_causes(&both, None);
        assert_eq!(causes, [Cause::FunctionAbsent, Cause::FunctionNotTraceable]);
        assert!(fixes(&causes).contains("kallsyms"));
        assert!(fixes(&causes).contains("available_filter_functions"));
    }
}
