//! One remembered launch, a process's latest synchronisations, and whether one covers the
//! other: what the history keeps per process to mark a suspect kernel completed.

use std::collections::HashMap;
use std::sync::Arc;

use gpuship_sinks::schema::{CallGpu, CudaRow};

use crate::sources::cuda::kernels::KernelName;

/// One launch, as remembered.
#[derive(Debug, Clone)]
pub(super) struct Launch {
    pub(super) time_ns: i64,
    /// When the launch call returned (its entry time for an entry-only launch).
    pub(super) end_ns: i64,
    pub(super) tid: i32,
    pub(super) function_id: u32,
    pub(super) handle: u64,
    /// None: a handle never announced.
    pub(super) name: Option<Arc<KernelName>>,
    pub(super) stream: Option<u64>,
    pub(super) grid: [Option<u32>; 3],
    pub(super) block: [Option<u32>; 3],
    /// The GPU it ran on, when known.
    pub(super) gpu: Option<Arc<CallGpu>>,
}

impl Launch {
    /// Whether it may have run on the GPU at `bus_id` (an unknown GPU may be any).
    pub(super) fn may_be_on(&self, bus_id: Option<&str>) -> bool {
        match (
            bus_id,
            self.gpu.as_ref().and_then(|g| g.pci_bus_id.as_deref()),
        ) {
            (Some(wanted), Some(ran_on)) => wanted.eq_ignore_ascii_case(ran_on),
            _ => true,
        }
    }
}

/// A process's latest successful synchronisations (their entry times, Unix ns): of each
/// thread's current context (`cuCtxSynchronize` waits for the calling thread's context only, and
/// which context a thread has is not tracked yet, so it covers that thread's launches), and of
/// each stream (a stream belongs to one context: it covers launches of any thread).
#[derive(Debug, Default)]
pub(super) struct Syncs {
    pub(super) context_by_thread: HashMap<i32, i64>,
    pub(super) streams: HashMap<u64, i64>,
}

impl Syncs {
    /// Whether a synchronisation that began after `launch` returned covered it.
    pub(super) fn covers(&self, launch: &Launch) -> bool {
        let after = |time: Option<i64>| time.is_some_and(|t| t >= launch.end_ns);
        after(self.context_by_thread.get(&launch.tid).copied())
            || after(launch.stream.and_then(|s| self.streams.get(&s).copied()))
    }
}

/// A launch row's grid and block (block z is unknown for a launch read from registers only).
pub(super) fn launch_dims(row: &CudaRow<'_>) -> ([Option<u32>; 3], [Option<u32>; 3]) {
    match row.launch {
        Some(dims) => {
            let z = (!dims.registers_only).then_some(dims.block[2]);
            (
                dims.grid.map(Some),
                [Some(dims.block[0]), Some(dims.block[1]), z],
            )
        }
        None => ([None; 3], [None; 3]),
    }
}
