//! Why a probe cannot run, as a closed set of causes, each with the one fix that addresses it.
//! The checks (each source's doctor module) find the cause (from what they observed, or from the error a load or attach
//! returned) and take the fix from here, so a fix can never be given for another cause: a
//! driver function refused by kernel lockdown is told about the boot-time setting, not to load
//! modules it already has.

/// One reason a probe or prerequisite does not work here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cause {
    /// Not root and missing the capabilities to load BPF programs.
    MissingCapabilities,
    /// The kernel has no BTF (`/sys/kernel/btf/vmlinux`).
    NoKernelBtf,
    /// tracefs is not mounted and could not be mounted.
    TracefsUnmounted,
    /// Kernel lockdown (`integrity` or `confidentiality`) refuses the program.
    Lockdown(String),
    /// Refused with EPERM although root and not locked down: an LSM or a sandbox.
    SecurityPolicy,
    /// The NVIDIA kernel driver is not loaded (no tracepoint, no device, no module).
    DriverNotLoaded,
    /// A driver function is not in the kernel or any module: renamed, inlined, or its module
    /// not loaded.
    FunctionAbsent,
    /// A driver function exists but cannot be traced (no ftrace entry, or no BTF for it).
    FunctionNotTraceable,
    /// The NVIDIA module is loaded but was built without BTF.
    ModuleWithoutBtf,
    /// The kernel log device is missing (a container without `/dev/kmsg`).
    KmsgMissing,
    /// The kernel log may not be read (no CAP_SYSLOG, or `dmesg_restrict`).
    KmsgDenied,
    /// No `libcuda.so.1` where the config looks.
    NoCudaLibrary,
    /// A configured library path does not exist.
    CudaLibraryPathMissing,
    /// The file named as libcuda is not a readable ELF library.
    NotACudaLibrary,
    /// None of the configured functions is exported by the library.
    NoExportedFunction,
    /// A default function this driver version does not export (harmless).
    FunctionNotExported,
    /// The XID tracepoint exists but its format differs from what the config expects.
    TracepointFormat,
    /// The kernel lacks a hook gpuship uses (uprobes, syscall tracepoints).
    KernelFeature(&'static str),
    /// Something else; the detail says what.
    Unknown,
}

impl Cause {
    /// The fix for this cause.
    pub fn fix(&self) -> String {
        match self {
            Cause::MissingCapabilities => {
                "run as root, or grant CAP_BPF CAP_PERFMON CAP_SYS_ADMIN CAP_SYSLOG".into()
            }
            Cause::NoKernelBtf => "use a kernel built with CONFIG_DEBUG_INFO_BTF=y".into(),
            Cause::TracefsUnmounted => "mount -t tracefs nodev /sys/kernel/tracing".into(),
            Cause::Lockdown(mode) => {
                let meanwhile = if mode == "confidentiality" {
                    "boot with lockdown=integrity at most for the tracepoints and uprobes to read \
                     memory"
                } else {
                    "meanwhile the ioctl tracepoints, the XID tracepoint, the kernel log and the \
                     CUDA uprobes still work"
                };
                format!(
                    "kernel lockdown ({mode}) forbids it; lockdown is a boot-time setting (the \
                     lockdown= kernel parameter, or Secure Boot, which turns it on) that only a \
                     boot without it lifts; {meanwhile}"
                )
            }
            Cause::SecurityPolicy => {
                "an LSM (SELinux, AppArmor, a BPF LSM) or the VM's sandbox refuses BPF tracing \
                 programs: allow bpf program loading for gpuship in that policy"
                    .into()
            }
            Cause::DriverNotLoaded => {
                "load the NVIDIA kernel driver (modprobe nvidia; nvidia-uvm for UVM)".into()
            }
            Cause::FunctionAbsent => {
                "name this driver version's function (\"a|b\" fallbacks; /proc/kallsyms lists \
                 them), or load the module that has it; kprobes are not needed"
                    .into()
            }
            Cause::FunctionNotTraceable => {
                "choose a function of this driver that ftrace instruments (listed in \
                 /sys/kernel/tracing/available_filter_functions); the module needs BTF \
                 (/sys/kernel/btf/nvidia)"
                    .into()
            }
            Cause::ModuleWithoutBtf => {
                "rebuild the NVIDIA module with BTF (CONFIG_DEBUG_INFO_BTF_MODULES=y and pahole \
                 at build time); only driver function hooks need it"
                    .into()
            }
            Cause::KmsgMissing => "in a container, mount the host's /dev/kmsg".into(),
            Cause::KmsgDenied => {
                "run as root or with CAP_SYSLOG (kernel.dmesg_restrict = 1 requires it)".into()
            }
            Cause::NoCudaLibrary => {
                "install the NVIDIA driver, or set [sources.cuda] libraries to the path of \
                 libcuda.so.1"
                    .into()
            }
            Cause::CudaLibraryPathMissing => "fix [sources.cuda] libraries".into(),
            Cause::NotACudaLibrary => {
                "point [sources.cuda] libraries at the real libcuda.so.1".into()
            }
            Cause::NoExportedFunction => {
                "set [sources.cuda] functions to names the library exports".into()
            }
            Cause::FunctionNotExported => "none needed: this driver does not have it".into(),
            Cause::TracepointFormat => "check the tracepoint's format and the field names in \
                 [sources.xid.tracepoint_fields]"
                .into(),
            Cause::KernelFeature(feature) => format!("use a kernel with {feature}"),
            Cause::Unknown => "see the detail; run with RUST_LOG=debug for libbpf's log".into(),
        }
    }
}

/// The cause of a BPF program load or attach that failed with `error`, given the kernel's
/// lockdown mode: a refusal (EPERM) is lockdown when the kernel is locked down, else a
/// policy; other errors are `otherwise`.
pub fn refusal_or(error: &str, lockdown: Option<&str>, otherwise: Cause) -> Cause {
    let refused = error.contains("EPERM") || error.contains("Operation not permitted");
    match (refused, lockdown) {
        (true, Some(mode)) if mode != "none" => Cause::Lockdown(mode.to_string()),
        (true, _) => Cause::SecurityPolicy,
        (false, _) => otherwise,
    }
}

/// The fixes of `causes`, joined.
pub fn fixes(causes: &[Cause]) -> String {
    causes
        .iter()
        .map(Cause::fix)
        .collect::<Vec<_>>()
        .join("; and ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_are_lockdown_only_when_locked_down() {
        let error = "loading: Operation not permitted (os error 1)";
        assert_eq!(
            refusal_or(error, Some("confidentiality"), Cause::Unknown),
            Cause::Lockdown("confidentiality".into())
        );
        assert_eq!(
            refusal_or(error, Some("none"), Cause::Unknown),
            Cause::SecurityPolicy
        );
        assert_eq!(
            refusal_or(error, None, Cause::Unknown),
            Cause::SecurityPolicy
        );
        assert_eq!(
            refusal_or("No such file", Some("integrity"), Cause::TracepointFormat),
            Cause::TracepointFormat
        );
    }

    #[test]
    fn every_cause_has_a_fix_that_names_its_own_remedy() {
        let expectations: [(Cause, &str); 19] = [
            (Cause::MissingCapabilities, "CAP_BPF"),
            (Cause::NoKernelBtf, "CONFIG_DEBUG_INFO_BTF"),
            (Cause::TracefsUnmounted, "mount -t tracefs"),
            (Cause::Lockdown("integrity".into()), "boot-time setting"),
            (Cause::SecurityPolicy, "LSM"),
            (Cause::DriverNotLoaded, "modprobe nvidia"),
            (Cause::FunctionAbsent, "this driver version's function"),
            (Cause::FunctionNotTraceable, "available_filter_functions"),
            (Cause::ModuleWithoutBtf, "CONFIG_DEBUG_INFO_BTF_MODULES"),
            (Cause::KmsgMissing, "mount the host's /dev/kmsg"),
            (Cause::KmsgDenied, "CAP_SYSLOG"),
            (Cause::NoCudaLibrary, "install the NVIDIA driver"),
            (Cause::CudaLibraryPathMissing, "[sources.cuda] libraries"),
            (Cause::NotACudaLibrary, "the real libcuda.so.1"),
            (Cause::NoExportedFunction, "names the library exports"),
            (Cause::FunctionNotExported, "none needed"),
            (Cause::TracepointFormat, "tracepoint_fields"),
            (Cause::KernelFeature("CONFIG_UPROBES"), "CONFIG_UPROBES"),
            (Cause::Unknown, "RUST_LOG=debug"),
        ];
        for (cause, remedy) in expectations {
            let fix = cause.fix();
            assert!(fix.contains(remedy), "{cause:?}: {fix}");
        }
        // Only the causes about the driver being absent tell to load it.
        for (cause, _) in [
            (Cause::Lockdown("integrity".into()), ()),
            (Cause::SecurityPolicy, ()),
            (Cause::FunctionNotTraceable, ()),
            (Cause::ModuleWithoutBtf, ()),
            (Cause::TracepointFormat, ()),
        ] {
            assert!(!cause.fix().contains("modprobe"), "{cause:?}");
            assert!(!cause.fix().contains("load the NVIDIA"), "{cause:?}");
        }
    }
}
