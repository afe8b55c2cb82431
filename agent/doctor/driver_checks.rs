//! The driver-side checks of `gpuship doctor`: the ioctl hook and the driver functions (each
//! tried by loading and attaching), and the kernel settings they depend on (kptr_restrict,
//! kprobes, the nvidia module's BTF).

use std::mem::MaybeUninit;
use std::path::Path;

use super::causes::{self, Cause};
use super::checks::presence;
use super::Check;
use crate::config::Config;
use crate::sources::driver;

/// The ioctl hook and every driver function (configured ones required, the built-in candidates
/// informational), each tried by loading and attaching.
pub(super) fn driver_checks(config: &Config, lockdown: Option<&str>) -> Vec<Check> {
    let driver_config = &config.sources.driver;
    let mut checks = Vec::new();
    if driver_config.ioctl {
        // Required only when the majors were named: "auto" on a host without the driver is fine.
        let required = !driver_config.device_majors.is_empty();
        let only_ioctl = crate::config::DriverSourceConfig {
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
                let cause = causes::refusal_or(&detail, lockdown, otherwise);
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
                let fix = causes::fixes(&causes::driver_function(&reasons, lockdown));
                Check::fail(probe, required, reasons, fix)
            }
        });
    }
    checks
}

pub(super) fn kptr_restrict() -> Check {
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

pub(super) fn kprobes(tracefs_root: Option<&Path>) -> Check {
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
