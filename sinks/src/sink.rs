//! The contract between the pipeline and a destination.
//!
//! A sink is built from its validated config, then `run` consumes batches from a bounded queue
//! until the queue closes (shutdown), finishing everything it holds before it returns. It counts
//! what it received, delivered (acknowledged: for Parquet, fsynced and renamed into place) and
//! failed, so the agent can prove `received = delivered + failed + in_flight` for every sink.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::sync::mpsc;

use crate::{EventBatch, EventKind};

/// Errors that end a sink's run.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    /// The destination could not be prepared (e.g. directory not writable).
    #[error("{sink}: cannot start: {reason}")]
    Start {
        /// Sink name.
        sink: String,
        /// What went wrong.
        reason: String,
    },
    /// The sink's worker thread or task died.
    #[error("{sink}: worker failed: {reason}")]
    Worker {
        /// Sink name.
        sink: String,
        /// What went wrong.
        reason: String,
    },
}

/// A counter per event kind.
#[derive(Debug, Default)]
pub struct KindCounters([AtomicU64; 2]);

impl KindCounters {
    fn slot(kind: EventKind) -> usize {
        match kind {
            EventKind::Xid => 0,
            EventKind::Cuda => 1,
        }
    }

    /// Adds `n` events of `kind`.
    pub fn add(&self, kind: EventKind, n: u64) {
        self.0[Self::slot(kind)].fetch_add(n, Ordering::Relaxed);
    }

    /// The count for one kind.
    pub fn get(&self, kind: EventKind) -> u64 {
        self.0[Self::slot(kind)].load(Ordering::Relaxed)
    }

    /// The count over all kinds.
    pub fn total(&self) -> u64 {
        EventKind::ALL.iter().map(|&k| self.get(k)).sum()
    }
}

/// What one sink has done with the events it was given.
#[derive(Debug, Default)]
pub struct SinkStats {
    /// Events taken off the sink's queue.
    pub received: KindCounters,
    /// Events the destination acknowledged.
    pub delivered: KindCounters,
    /// Events the pipeline could not hand to the sink (its queue was closed: the sink died).
    pub dropped: KindCounters,
    /// Events lost to a destination error (e.g. a Parquet file that could not be written).
    pub failed: KindCounters,
}

impl SinkStats {
    /// Events received but neither delivered nor failed yet (buffered in an open file, in a
    /// request on the wire, ...).
    pub fn in_flight(&self, kind: EventKind) -> u64 {
        self.received
            .get(kind)
            .saturating_sub(self.delivered.get(kind) + self.failed.get(kind))
    }
}

/// What a running sink consumes.
#[derive(Debug)]
pub struct SinkInput {
    /// Batches to deliver; closed by the pipeline at shutdown.
    pub batches: mpsc::Receiver<EventBatch>,
    /// Where the sink counts its work.
    pub stats: Arc<SinkStats>,
}

/// The future a sink's run returns.
pub type SinkRun = Pin<Box<dyn Future<Output = Result<(), SinkError>> + Send>>;

/// A destination for event batches.
pub trait Sink: Send {
    /// Name used in logs and metrics (unique per agent).
    fn name(&self) -> &str;

    /// Delivers batches from `input` until it closes, then finishes everything it holds
    /// (closes files, waits for acknowledgements) and returns. Must be called inside a tokio
    /// runtime.
    fn run(self: Box<Self>, input: SinkInput) -> SinkRun;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_flight_is_what_is_neither_delivered_nor_failed() {
        let stats = SinkStats::default();
        stats.received.add(EventKind::Cuda, 10);
        stats.delivered.add(EventKind::Cuda, 6);
        stats.failed.add(EventKind::Cuda, 1);
        stats.received.add(EventKind::Xid, 2);
        assert_eq!(stats.in_flight(EventKind::Cuda), 3);
        assert_eq!(stats.in_flight(EventKind::Xid), 2);
        assert_eq!(stats.received.total(), 12);
    }
}
