//! Opens the CUDA BPF object, sizes its maps, sets its constants and loads the programs of the
//! attach style the kernel supports.

use std::mem::MaybeUninit;

use anyhow::Context;
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::OpenObject;

use crate::bpf::cuda::{CudaSkel, CudaSkelBuilder};
use crate::sources::cuda::config::CudaSourceConfig;
use crate::sources::cuda::recorder::RecorderSize;
use crate::sources::source::ProcessFilter;

/// Which optional programs to load.
#[derive(Debug, Clone, Copy)]
pub(super) struct Programs {
    /// The uprobe_multi programs (else one link per symbol).
    pub(super) multi: bool,
    /// The lookups' session program.
    pub(super) sessions: bool,
    /// The library-open tracepoints (discovery).
    pub(super) discover: bool,
    /// The budget's trap counting and calibration program.
    pub(super) count_traps: bool,
}

/// Opens the CUDA object, sizes its maps, sets its constants and loads the programs of the
/// attach style in use.
pub(super) fn open_and_load<'obj>(
    storage: &'obj mut MaybeUninit<OpenObject>,
    config: &CudaSourceConfig,
    filter: ProcessFilter,
    recorder: RecorderSize,
    programs: Programs,
) -> anyhow::Result<CudaSkel<'obj>> {
    let Programs {
        multi,
        sessions,
        discover,
        count_traps,
    } = programs;
    let mut open = CudaSkelBuilder::default()
        .open(storage)
        .context("opening the CUDA BPF object")?;
    let ring_bytes = config.ring_size_mib.saturating_mul(1024 * 1024);
    open.maps
        .cuda_ring
        .set_max_entries(ring_bytes)
        .context("sizing the CUDA ring")?;
    open.maps
        .call_slots
        .set_max_entries(config.inflight_slots)
        .context("sizing the in-flight call slots")?;
    open.maps
        .call_stats
        .set_max_entries(config.stats_max_entries)
        .context("sizing the call statistics table")?;
    open.maps
        .recorder
        .set_max_entries(recorder.entries())
        .context("sizing the flight recorder")?;
    let rodata = open
        .maps
        .rodata_data
        .as_deref_mut()
        .context("CUDA program has no rodata")?;
    rodata.filter_by_tgid = filter == ProcessFilter::Selected;
    // Wake the consumer early when a quarter of the ring is waiting.
    rodata.wakeup_threshold_bytes = u64::from(ring_bytes / 4);
    rodata.call_slot_mask = config.inflight_slots.saturating_sub(1);
    rodata.slow_call_ns = config.slow_call_ns;
    rodata.recorder_enabled = recorder.enabled();
    rodata.recorder_shift = recorder.shift;
    rodata.recorder_launch_details = config.flight_recorder_launch_details;
    rodata.repeat_lookups_at_entry = sessions;
    rodata.count_process_traps = count_traps;
    // Load only the programs of the attach style this kernel supports.
    open.progs.cuda_call_entry_multi.set_autoload(multi);
    open.progs.cuda_call_return_multi.set_autoload(multi);
    open.progs.cuda_lookup_session.set_autoload(sessions);
    open.progs.library_openat.set_autoload(discover);
    open.progs.library_openat2.set_autoload(discover);
    open.progs.trap_calibration.set_autoload(count_traps);
    open.load().context("loading the CUDA BPF program")
}
