//! Where a source's output goes: the narrow interfaces a source sees instead of the pipeline.
//!
//! A source turns records into rows and batches and hands them on through these traits; it
//! never sees the fan-out, the XID stage or the live view. `agent/run` implements them over
//! those (see `run/capture.rs`), which is how sources stay below them: nothing under
//! `sources/` imports `xid::` or `live::`.

use std::sync::Arc;
use std::time::Instant;

use gpuship_sinks::schema::{KernelSuspect, XidRecord};
use gpuship_sinks::EventBatch;

use super::functions::FunctionTable;
use crate::summary::CallTally;

/// Hands finished batches on to the sinks (counting them as batched).
pub trait BatchEmitter: Send + Sync {
    /// Sends one batch; blocks while a sink whose buffer is full says `block`.
    fn emit(&self, batch: EventBatch);
}

/// Takes XIDs from the sources that see them (reconciled, annotated and sent downstream).
pub trait XidSink: Send + Sync {
    /// One decoded XID.
    fn report(&self, record: XidRecord);

    /// The lowest kernel-log sequence number reported and not yet handed to the sinks (the
    /// kernel-log source's cursor must not pass it).
    fn oldest_unsettled_kmsg(&self) -> Option<u64>;
}

/// What XID attribution needs from the CUDA calls: which processes are making calls, and the
/// incident a failed call belongs to.
pub trait CallAttribution: Send + Sync {
    /// Processes seen making calls: (pid, latest call time in Unix ns).
    fn processes_active(&self, calls: &mut dyn Iterator<Item = (i32, i64)>);

    /// The incident that affected `pid` at `time_ns`, if any.
    fn incident_for(&self, pid: i32, time_ns: i64) -> Option<Arc<str>>;

    /// Every process an XID incident affected lately: (pid, incident, the XID's time in Unix
    /// ns). The flight recorder writes their calls of the seconds before.
    fn incident_links(&self) -> Vec<(i32, Arc<str>, i64)> {
        Vec::new()
    }

    /// Where an XID's suspects come from: the CUDA source's launch history, registered once
    /// it runs.
    fn launch_history(&self, _history: Arc<dyn LaunchHistory>) {}
}

/// The last kernel launches of each process, for an XID's suspects.
pub trait LaunchHistory: Send + Sync {
    /// Up to `max` kernels `pid` launched at or before `before_ns` (Unix ns), most recent
    /// first, on the GPU at `bus_id` (launches whose GPU is unknown included).
    fn suspects(
        &self,
        pid: i32,
        bus_id: Option<&str>,
        before_ns: i64,
        max: usize,
    ) -> Vec<KernelSuspect>;

    /// Whether the overhead budget left `pid`'s launches unprobed at some time in the window
    /// before `before_ns` that suspects and the flight recorder draw from: the launch that
    /// faulted may then be missing from them.
    fn launches_sampled_before(&self, pid: i32, before_ns: i64) -> bool;
}

/// Running per-call totals for a view of the calls as they happen (the live view).
pub trait CallView: Send {
    /// Counts one call; true when the caller should offer a publication (see `publish`).
    fn call(&mut self, pid: i32, comm: &[i8], failed: bool) -> bool;

    /// Counts `calls` successful calls of one process at once (`stats` mode's intervals).
    fn calls(&mut self, pid: i32, comm: &[i8], calls: u64);

    /// Publishes the totals if one is due, or now when `now_anyway`.
    fn publish(&mut self, calls: &CallTally, now: Instant, now_anyway: bool);

    /// Replaces the memory held per GPU (each statistics interval).
    fn memory(&mut self, _held: Vec<crate::health::GpuMemoryHealth>) {}

    /// Names function ids with `functions` from now on (a library found later brought more;
    /// the ids already given keep their names).
    fn functions(&mut self, _functions: FunctionTable) {}
}

/// Opens a [`CallView`] once the source knows its function names.
pub trait CallViews: Send + Sync {
    /// A view naming function ids with `functions`.
    fn open(&self, functions: FunctionTable) -> Box<dyn CallView>;
}

/// Everything a source may hand on, cloned into each capture thread.
#[derive(Clone)]
pub struct Outputs {
    /// Batches to the sinks.
    pub batches: Arc<dyn BatchEmitter>,
    /// XIDs to the XID stage.
    pub xids: Arc<dyn XidSink>,
    /// CUDA calls to XID attribution.
    pub attribution: Arc<dyn CallAttribution>,
    /// CUDA calls to the live view.
    pub calls: Arc<dyn CallViews>,
}
