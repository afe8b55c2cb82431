//! NVIDIA kernel-driver activity without kprobes (see `bpf/driver.bpf.c`): ioctls on NVIDIA
//! device files from the syscall tracepoints, and driver functions timed with fentry/fexit
//! through the modules' BTF. Every hook is optional; one that cannot attach is reported with the
//! reason and the others carry on.
//!
//! - [`devices`]: device names by number; [`requests`]: ioctl request numbers decoded.
//! - [`decode`]: ring records to rows; [`batcher`]: rows to batches.
//! - [`source`]: the source as the consumer runs it; loading and hook checks are here.

pub mod batcher;
pub mod config;
pub mod decode;
pub mod devices;
pub mod doctor;
mod records;
pub mod request_names;
pub mod requests;
pub mod source;
pub mod unnamed;

pub use source::DriverSource;

use std::cell::RefCell;
use std::mem::MaybeUninit;

use anyhow::Context;
use libbpf_rs::skel::{OpenSkel, Skel, SkelBuilder};
use libbpf_rs::{Link, OpenObject};

use crate::bpf::driver::{DriverSkel, DriverSkelBuilder};
use crate::diagnosis::lockdown_mode;
use config::DriverSourceConfig;

/// Driver functions worth timing, as named by driver 580 (seen in /proc/kallsyms on an H100):
/// `gpuship doctor` tries each, and `functions` may name them (with `|` fallbacks for other
/// driver versions).
pub const CANDIDATE_FUNCTIONS: &[&str] = &[
    "nvidia_unlocked_ioctl",
    "nvidia_open",
    "nvidia_close",
    "nvidia_mmap",
    "nvidia_isr",
    "nvidia_isr_msix",
    "nvidia_isr_kthread_bh",
    "nv_report_error",
    "uvm_unlocked_ioctl_entry",
    "uvm_parent_gpu_service_replayable_faults",
    "uvm_parent_gpu_service_non_replayable_fault_buffer",
];

/// Number of fentry/fexit slots in the program.
pub const SLOTS: usize = 8;

/// What happened to one hook.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookStatus {
    /// `ioctl`, or the function spec as configured.
    pub hook: String,
    /// Whether it runs.
    pub attached: bool,
    /// The attached function, or why not.
    pub detail: String,
}

/// The loaded program and its links.
pub struct DriverHooks<'obj> {
    /// The skeleton (ring and counters).
    pub skel: DriverSkel<'obj>,
    links: RefCell<Vec<Link>>,
    /// The function timed by each slot (`None` for unused slots).
    pub slot_functions: Vec<Option<String>>,
}

impl DriverHooks<'_> {
    /// Detaches every hook (the ring stays readable).
    pub fn detach(&self) {
        self.links.borrow_mut().clear();
    }
}

fn slot_program_names(slot: usize) -> [String; 2] {
    [format!("fentry_slot{slot}"), format!("fexit_slot{slot}")]
}

/// The device majors to keep: configured, or the `nvidia*` ones in /proc/devices.
pub fn device_majors(config: &DriverSourceConfig) -> Vec<u32> {
    if !config.device_majors.is_empty() {
        return config.device_majors.clone();
    }
    std::fs::read_to_string("/proc/devices")
        .map(|text| devices::nvidia_majors(&text))
        .unwrap_or_default()
}

/// Tries one driver function on one slot by loading and attaching a throwaway copy of the
/// program: the only dependable answer to "can this be traced here" (a symbol in kallsyms may
/// have no ftrace entry, no BTF, or be inlined away).
pub fn try_function(function: &str) -> Result<(), String> {
    let mut storage = MaybeUninit::uninit();
    let mut open = DriverSkelBuilder::default()
        .open(&mut storage)
        .map_err(|e| format!("opening the driver program: {e}"))?;
    let wanted = slot_program_names(0);
    for mut prog in open.open_object_mut().progs_mut() {
        let name = prog.name().to_string_lossy().into_owned();
        if wanted.contains(&name) {
            prog.set_attach_target(0, Some(function.to_string()))
                .map_err(|e| explain_load_error(function, &e.to_string()))?;
        } else {
            prog.set_autoload(false);
        }
    }
    let skel = open
        .load()
        .map_err(|e| explain_load_error(function, &e.to_string()))?;
    for prog in skel.object().progs_mut() {
        if wanted.contains(&prog.name().to_string_lossy().into_owned()) {
            let link = prog
                .attach()
                .map_err(|e| format!("{function} cannot be attached: {e}"))?;
            drop(link);
        }
    }
    Ok(())
}

/// The first alternative of `spec` (`"a|b"`) that can be traced here, or every reason why none
/// can, joined.
pub fn resolve_spec(spec: &str) -> Result<String, String> {
    let mut reasons = Vec::new();
    for candidate in spec.split('|').map(str::trim) {
        match try_function(candidate) {
            Ok(()) => return Ok(candidate.to_string()),
            Err(reason) => reasons.push(reason),
        }
    }
    Err(reasons.join("; "))
}

/// Turns libbpf's load error into a reason a person can act on, using /proc/kallsyms to tell
/// an absent symbol from one the kernel cannot trace.
fn explain_load_error(function: &str, error: &str) -> String {
    let in_kallsyms = std::fs::read_to_string("/proc/kallsyms")
        .map(|text| {
            text.lines()
                .any(|l| l.split_whitespace().nth(2) == Some(function))
        })
        .unwrap_or(false);
    if error.contains("Operation not permitted") || error.contains("EPERM") {
        let why = match lockdown_mode() {
            Some(mode) if mode != "none" => {
                format!("kernel lockdown ({mode}) forbids fentry/fexit")
            }
            _ => "a security policy forbids fentry/fexit here (an LSM or the VM's sandbox)".into(),
        };
        format!("the kernel refused to load a tracing program for {function} (EPERM): {why}")
    } else if in_kallsyms {
        format!("{function} is in /proc/kallsyms but cannot be traced: not ftrace-instrumented (only functions built through Kbuild's ftrace get an entry) or no BTF for its module ({error})")
    } else {
        format!("{function} is not in the kernel or any loaded module (module not loaded, renamed in this driver version, or inlined)")
    }
}

/// Which hooks can run here: the device majors for the ioctl hook (empty when it is off or
/// there are no NVIDIA devices), the function timed by each slot, and a status for each hook
/// that is configured.
fn plan_hooks(config: &DriverSourceConfig) -> (Vec<u32>, Vec<Option<String>>, Vec<HookStatus>) {
    let mut statuses = Vec::new();
    let majors = if config.ioctl {
        device_majors(config)
    } else {
        Vec::new()
    };
    if config.ioctl && majors.is_empty() {
        statuses.push(HookStatus {
            hook: "ioctl".into(),
            attached: false,
            detail: "no NVIDIA character devices in /proc/devices (driver not loaded)".into(),
        });
    }
    // Slot targets: the first alternative of each spec that can be traced here.
    let mut slot_functions: Vec<Option<String>> = vec![None; SLOTS];
    for (slot, spec) in config.functions.iter().take(SLOTS).enumerate() {
        let resolved = resolve_spec(spec);
        statuses.push(HookStatus {
            hook: spec.clone(),
            attached: resolved.is_ok(),
            detail: resolved.clone().unwrap_or_else(|reasons| reasons),
        });
        slot_functions[slot] = resolved.ok();
    }
    (majors, slot_functions, statuses)
}

/// Loads the program with the ioctl hook (when enabled and NVIDIA majors exist) and every
/// configured function that can be traced. `None` when no hook could run.
pub fn load<'obj>(
    storage: &'obj mut MaybeUninit<OpenObject>,
    config: &DriverSourceConfig,
) -> anyhow::Result<(Option<DriverHooks<'obj>>, Vec<HookStatus>)> {
    let (majors, slot_functions, mut statuses) = plan_hooks(config);
    let ioctl = !majors.is_empty();
    if !ioctl && slot_functions.iter().all(Option::is_none) {
        return Ok((None, statuses));
    }
    let (skel, links) = open_and_attach(storage, &majors, &slot_functions)?;
    if ioctl {
        statuses.insert(
            0,
            HookStatus {
                hook: "ioctl".into(),
                attached: true,
                detail: format!("syscalls:sys_{{enter,exit}}_ioctl on device majors {majors:?}"),
            },
        );
    }
    tracing::info!(ioctl, majors = ?majors, functions = ?slot_functions.iter().flatten().collect::<Vec<_>>(), "driver hooks attached");
    Ok((
        Some(DriverHooks {
            skel,
            links: RefCell::new(links),
            slot_functions,
        }),
        statuses,
    ))
}

/// Opens the program, keeps the ioctl hook when `majors` is not empty and the slots that name
/// a function, loads and attaches them.
fn open_and_attach<'obj>(
    storage: &'obj mut MaybeUninit<OpenObject>,
    majors: &[u32],
    slot_functions: &[Option<String>],
) -> anyhow::Result<(DriverSkel<'obj>, Vec<Link>)> {
    let ioctl = !majors.is_empty();
    let mut open = DriverSkelBuilder::default()
        .open(storage)
        .context("opening the driver BPF object")?;
    let rodata = open
        .maps
        .rodata_data
        .as_deref_mut()
        .context("driver program has no rodata")?;
    for (slot, major) in majors.iter().take(rodata.device_majors.len()).enumerate() {
        rodata.device_majors[slot] = *major;
    }
    rodata.device_major_count = majors.len().min(rodata.device_majors.len()) as u32;
    for mut prog in open.open_object_mut().progs_mut() {
        let name = prog.name().to_string_lossy().into_owned();
        if name.starts_with("handle_ioctl") {
            prog.set_autoload(ioctl);
            continue;
        }
        let slot = name
            .trim_start_matches("fentry_slot")
            .trim_start_matches("fexit_slot")
            .parse::<usize>()
            .unwrap_or(usize::MAX);
        match slot_functions.get(slot).cloned().flatten() {
            Some(function) => prog
                .set_attach_target(0, Some(function))
                .with_context(|| format!("setting the target of {name}"))?,
            None => prog.set_autoload(false),
        }
    }
    let skel = open.load().context("loading the driver BPF program")?;
    let mut links = Vec::new();
    for prog in skel.object().progs_mut() {
        if !prog.autoload() {
            continue;
        }
        let name = prog.name().to_string_lossy().into_owned();
        links.push(prog.attach().with_context(|| format!("attaching {name}"))?);
    }
    Ok((skel, links))
}
