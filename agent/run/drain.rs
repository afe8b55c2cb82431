//! The drain phase of `gpuship run`, in order: stop the sources (probes detached, rings
//! drained, batches flushed), let the XID stage emit what it held, save the sources' final
//! state, then let every sink finish what it holds.

use super::capture::Capture;
use super::start::Started;
use crate::sources::SourceStatus;

/// What the sources leave for the account phase.
pub(super) struct Drained {
    /// Each ring source's status when the capture last started.
    pub statuses: Vec<SourceStatus>,
    /// Sinks that failed, as messages.
    pub failed_sinks: Vec<String>,
}

/// Stops every source (if a capture runs), then waits for every sink.
pub(super) fn drain(capture: Option<Capture>, started: &mut Started) -> Drained {
    started.health.set_draining();
    tracing::info!("draining: stopping probes, draining rings, flushing batches");
    let statuses = capture.map(Capture::stop).unwrap_or_default();
    // Every source has counted its last XID and call: the collector gets the final totals.
    if let Some(export) = &started.metrics_export {
        started.runtime.block_on(export.export_now());
    }
    // Every producer is gone: closing the fan-out closes the queues, and the sinks finish
    // what they hold.
    let failed_sinks = started.sinks.finish(&started.runtime);
    Drained {
        statuses,
        failed_sinks,
    }
}
