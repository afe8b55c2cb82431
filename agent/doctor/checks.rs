//! The individual checks of `gpuship doctor`.

use std::mem::MaybeUninit;
use std::path::Path;

use super::causes::{self, Cause};
use super::driver_checks::{driver_checks, kprobes, kptr_restrict};
use super::Check;
use crate::config::Config;
use crate::sources::cuda::catalog::DEFAULT_FUNCTIONS;
use crate::sources::cuda::library::{exported_functions, resolve_libraries};
use crate::sources::cuda::probes::{self, ProcessFilter};
use crate::sources::kmsg::reader::{KmsgReader, StartAt};
use crate::sources::{driver, tracefs, xid_tracepoint};

/// Runs every check for `config`, in the order a person would fix them.
pub fn run_checks(config: &Config) -> Vec<Check> {
    let xid = &config.sources.xid;
    // Every source that loads BPF programs, the driver's too.
    let bpf = !config.sources.bpf_sources_on().is_empty();
    // Read once: several checks tell a lockdown refusal from other failures with it.
    let lockdown = driver::lockdown_mode();
    let lockdown = lockdown.as_deref();
    let mut checks = vec![capabilities(bpf), btf(bpf)];
    let tracefs_root = match tracefs::ensure_mounted() {
        Ok(root) => {
            checks.push(Check::pass(
                "tracefs",
                xid.tracepoint,
                format!("mounted at {}", root.display()),
            ));
            Some(root)
        }
        Err(reason) => {
            checks.push(Check::failed_because(
                "tracefs",
                xid.tracepoint,
                reason,
                &Cause::TracefsUnmounted,
            ));
            None
        }
    };
    checks.push(xid_tracepoint_check(
        config,
        tracefs_root.as_deref(),
        lockdown,
    ));
    checks.push(kmsg(config));
    checks.extend(cuda_checks(config, lockdown));
    checks.extend(driver_checks(config, lockdown));
    checks.push(kprobes(tracefs_root.as_deref()));
    checks.push(kptr_restrict());
    checks.push(nvidia_btf());
    checks.push(lockdown_check(bpf, lockdown));
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

/// A check that passes when `path` exists.
pub(super) fn presence(
    probe: &str,
    required: bool,
    path: &Path,
    missing: &str,
    fix: &str,
) -> Check {
    if path.exists() {
        Check::pass(probe, required, format!("{} present", path.display()))
    } else {
        Check::fail(probe, required, missing, fix)
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

fn xid_tracepoint_check(
    config: &Config,
    tracefs_root: Option<&Path>,
    lockdown: Option<&str>,
) -> Check {
    let xid = &config.sources.xid;
    let name = format!("xid_tracepoint {}", xid.tracepoint_name);
    if !xid.tracepoint {
        return Check::pass(name, false, "disabled in config");
    }
    let Some(root) = tracefs_root else {
        return Check::failed_because(
            name,
            true,
            "tracefs is not available",
            &Cause::TracefsUnmounted,
        );
    };
    let mut storage = MaybeUninit::uninit();
    let outcome = xid_tracepoint::load(&mut storage, xid, root);
    let check = match outcome {
        Ok(Ok(loaded)) => {
            loaded.detach();
            Check::pass(name, true, "loaded, attached and detached")
        }
        Ok(Err(reason)) => Check::fail(
            name,
            true,
            reason,
            format!(
                "{} (a version that has the nvidia_dev_xid tracepoint); meanwhile XIDs come from the kernel log",
                Cause::DriverNotLoaded.fix()
            ),
        ),
        Err(err) => {
            let detail = format!("{err:#}");
            let cause = causes::refusal_or(&detail, lockdown, Cause::TracepointFormat);
            Check::failed_because(name, true, detail, &cause)
        }
    };
    check
}

fn kmsg(config: &Config) -> Check {
    let xid = &config.sources.xid;
    if !xid.kmsg {
        return Check::pass("kmsg", false, "disabled in config");
    }
    match KmsgReader::open(&xid.kmsg_path, StartAt::End) {
        Ok(_) => Check::pass(
            "kmsg",
            true,
            format!("{} readable", xid.kmsg_path.display()),
        ),
        Err(err) => {
            let detail = err.to_string();
            let cause = causes::kmsg(&format!("{err:#}"));
            Check::failed_because("kmsg", true, detail, &cause)
        }
    }
}

fn cuda_checks(config: &Config, lockdown: Option<&str>) -> Vec<Check> {
    let cuda = &config.sources.cuda;
    if !cuda.enabled {
        return vec![Check::pass("cuda", false, "disabled in config")];
    }
    let (libraries, missing) = resolve_libraries(&cuda.libraries);
    let mut checks = Vec::new();
    for path in &missing {
        checks.push(Check::failed_because(
            format!("cuda library {path}"),
            false,
            "does not exist",
            &Cause::CudaLibraryPathMissing,
        ));
    }
    let proc_dir = Path::new("/proc");
    if cuda.discovers_libraries() {
        checks.extend(super::library_checks::mapped_libraries(proc_dir));
    }
    if libraries.is_empty() && !cuda.discovers_libraries() {
        checks.push(Check::failed_because(
            "cuda",
            true,
            format!("no libcuda.so.1 found (libraries = {:?})", cuda.libraries),
            &Cause::NoCudaLibrary,
        ));
        return checks;
    }
    // Which default functions each library exports (informational: drivers differ).
    let mut exported_anywhere: Vec<String> = Vec::new();
    for library in &libraries {
        match exported_functions(library) {
            Ok(functions) => exported_anywhere.extend(functions.into_iter().map(|f| f.name)),
            Err(err) => checks.push(Check::failed_because(
                format!("cuda library {}", library.display()),
                true,
                err.to_string(),
                &Cause::NotACudaLibrary,
            )),
        }
    }
    for (function, _) in DEFAULT_FUNCTIONS.iter().filter(|_| !libraries.is_empty()) {
        let present = exported_anywhere.iter().any(|name| name == function);
        if !present {
            checks.push(Check::failed_because(
                format!("cuda:{function}"),
                false,
                "not exported by the library",
                &Cause::FunctionNotExported,
            ));
        }
    }
    let mut storage = MaybeUninit::uninit();
    let outcome = probes::load(&mut storage, cuda, ProcessFilter::All, proc_dir);
    let check = match outcome {
        Ok(Ok(loaded)) => {
            let symbols = loaded.probed_symbols;
            let count = loaded.attached_files();
            loaded.detach();
            let noun = if count == 1 { "library" } else { "libraries" };
            let waiting = if count == 0 {
                "; no process maps a libcuda yet: each one a process maps is attached then"
            } else {
                ""
            };
            Check::pass(
                "cuda",
                true,
                format!("{symbols} symbols in {count} {noun} attached and detached{waiting}"),
            )
        }
        Ok(Err(reason)) => {
            let cause = causes::nothing_to_probe(&reason);
            Check::failed_because("cuda", true, reason, &cause)
        }
        Err(err) => {
            let detail = format!("{err:#}");
            let otherwise = Cause::KernelFeature("uprobes (CONFIG_UPROBES) and BTF");
            let cause = causes::refusal_or(&detail, lockdown, otherwise);
            Check::failed_because("cuda", true, detail, &cause)
        }
    };
    checks.push(check);
    checks
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
