//! The individual checks of `gpuship doctor`.

use std::mem::MaybeUninit;
use std::path::Path;

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
    let cuda = &config.sources.cuda;
    let bpf = xid.tracepoint || cuda.enabled;
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
            checks.push(Check::fail(
                "tracefs",
                xid.tracepoint,
                reason,
                "mount -t tracefs nodev /sys/kernel/tracing",
            ));
            None
        }
    };
    checks.push(xid_tracepoint_check(config, tracefs_root.as_deref()));
    checks.push(kmsg(config));
    checks.extend(cuda_checks(config));
    checks.extend(driver_checks(config));
    checks.push(kprobes(tracefs_root.as_deref()));
    checks.push(kptr_restrict());
    checks.push(nvidia_btf());
    checks.push(lockdown(bpf));
    checks
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
        Check::fail(
            "capabilities",
            required,
            format!("effective capabilities {caps:#x} lack CAP_BPF+CAP_PERFMON and CAP_SYS_ADMIN"),
            "run as root, or grant CAP_BPF CAP_PERFMON CAP_SYS_ADMIN CAP_SYSLOG",
        )
    }
}

/// A check that passes when `path` exists.
fn presence(probe: &str, required: bool, path: &Path, missing: &str, fix: &str) -> Check {
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
        "use a kernel built with CONFIG_DEBUG_INFO_BTF=y",
    )
}

fn xid_tracepoint_check(config: &Config, tracefs_root: Option<&Path>) -> Check {
    let xid = &config.sources.xid;
    let name = format!("xid_tracepoint {}", xid.tracepoint_name);
    if !xid.tracepoint {
        return Check::pass(name, false, "disabled in config");
    }
    let Some(root) = tracefs_root else {
        return Check::fail(
            name,
            true,
            "tracefs is not available",
            "mount -t tracefs nodev /sys/kernel/tracing",
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
            "load the NVIDIA kernel driver (a version that has the nvidia_dev_xid tracepoint); meanwhile XIDs come from the kernel log",
        ),
        Err(err) => Check::fail(name, true, format!("{err:#}"), "check the tracepoint's format and the field names in [sources.xid.tracepoint_fields]"),
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
        Err(err) => Check::fail(
            "kmsg",
            true,
            err.to_string(),
            "run as root or with CAP_SYSLOG; in a container, mount /dev/kmsg",
        ),
    }
}

fn cuda_checks(config: &Config) -> Vec<Check> {
    let cuda = &config.sources.cuda;
    if !cuda.enabled {
        return vec![Check::pass("cuda", false, "disabled in config")];
    }
    let (libraries, missing) = resolve_libraries(&cuda.libraries);
    let mut checks = Vec::new();
    for path in &missing {
        checks.push(Check::fail(
            format!("cuda library {path}"),
            false,
            "does not exist",
            "fix [sources.cuda] libraries",
        ));
    }
    if libraries.is_empty() {
        checks.push(Check::fail(
            "cuda",
            true,
            format!("no libcuda.so.1 found (libraries = {:?})", cuda.libraries),
            "install the NVIDIA driver, or set [sources.cuda] libraries to the path of libcuda.so.1",
        ));
        return checks;
    }
    // Which default functions each library exports (informational: drivers differ).
    let mut exported_anywhere: Vec<String> = Vec::new();
    for library in &libraries {
        match exported_functions(library) {
            Ok(functions) => exported_anywhere.extend(functions.into_iter().map(|f| f.name)),
            Err(err) => checks.push(Check::fail(
                format!("cuda library {}", library.display()),
                true,
                err.to_string(),
                "point [sources.cuda] libraries at the real libcuda.so.1",
            )),
        }
    }
    for (function, _) in DEFAULT_FUNCTIONS {
        let present = exported_anywhere.iter().any(|name| name == function);
        if !present {
            checks.push(Check::fail(
                format!("cuda:{function}"),
                false,
                "not exported by the library",
                "none needed: this driver does not have it",
            ));
        }
    }
    let mut storage = MaybeUninit::uninit();
    let outcome = probes::load(&mut storage, cuda, ProcessFilter::All);
    let check = match outcome {
        Ok(Ok(loaded)) => {
            let symbols = loaded.probed_symbols;
            loaded.detach();
            let count = libraries.len();
            let noun = if count == 1 { "library" } else { "libraries" };
            Check::pass(
                "cuda",
                true,
                format!("{symbols} symbols in {count} {noun} attached and detached"),
            )
        }
        Ok(Err(reason)) => Check::fail(
            "cuda",
            true,
            reason,
            "set [sources.cuda] functions to names the library exports",
        ),
        Err(err) => Check::fail(
            "cuda",
            true,
            format!("{err:#}"),
            "needs uprobes (CONFIG_UPROBES) and BTF; check the kernel and capabilities",
        ),
    };
    checks.push(check);
    checks
}

/// The ioctl hook and every driver function (configured ones required, the built-in candidates
/// informational), each tried by loading and attaching.
fn driver_checks(config: &Config) -> Vec<Check> {
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
                "load the NVIDIA driver (nvidia, nvidia-uvm modules), or set sources.driver.device_majors",
            ),
            Err(err) => Check::fail(
                "driver_ioctl",
                required,
                format!("{err:#}"),
                "needs the syscalls:sys_enter_ioctl tracepoints (CONFIG_FTRACE_SYSCALLS) and BTF",
            ),
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
            Ok(function) => {
                Check::pass(probe, required, format!("fentry/fexit on {function} attach"))
            }
            Err(reasons) => Check::fail(
                probe,
                required,
                reasons,
                "load the NVIDIA modules; name this driver version's function (use \"a|b\" fallbacks); kprobes are not needed",
            ),
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
            "only the doctor's explanations use kallsyms; fentry attaches through BTF regardless",
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
    presence(
        "nvidia_module_btf",
        false,
        Path::new("/sys/kernel/btf/nvidia"),
        "no /sys/kernel/btf/nvidia (module not loaded or built without BTF)",
        "load the NVIDIA driver; only driver function hooks need it",
    )
}

fn lockdown(required: bool) -> Check {
    match driver::lockdown_mode().as_deref() {
        Some("confidentiality") => Check::fail(
            "lockdown",
            required,
            "kernel lockdown is confidentiality: BPF may not read kernel or user memory",
            "boot with lockdown=integrity or none",
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
