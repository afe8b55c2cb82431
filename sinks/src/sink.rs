//! The contract between the pipeline and a destination.
//!
//! A sink is built from its validated config, then `run` consumes batches from its bounded
//! queue ([`crate::queue`]) until the queue closes (shutdown), finishing everything it holds
//! before it returns. The queue counts what the sink was offered (received) and what the
//! policy dropped; the sink counts what it delivered (acknowledged: for Parquet, fsynced and
//! renamed into place) and what failed, so the agent can prove
//! `received = delivered + dropped + failed + spooled_pending + in_flight` for every sink.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde::Serialize;

use crate::queue::QueueReceiver;
use crate::EventKind;

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
pub struct KindCounters([AtomicU64; 3]);

impl KindCounters {
    pub(crate) fn slot(kind: EventKind) -> usize {
        match kind {
            EventKind::Xid => 0,
            EventKind::Cuda => 1,
            EventKind::Driver => 2,
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

/// Why events were dropped before reaching a sink's destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DropReason {
    /// The memory queue was full and its policy is `drop_newest` or `drop_oldest`.
    BufferFull,
    /// The spool reached `max_size` (CUDA only; XIDs are kept).
    SpoolFull,
    /// Writing to the spool failed (disk error).
    SpoolFailed,
    /// A spooled segment failed its checks when read back.
    SpoolCorrupt,
    /// Undelivered at the shutdown deadline, and the sink has no spool.
    ShutdownTimeout,
    /// The sink had stopped (its task ended), so nothing could be handed to it.
    SinkStopped,
    /// The destination took the request but refused these events (OTLP partial success).
    Rejected,
}

impl DropReason {
    /// Every reason, in a fixed order.
    pub const ALL: [DropReason; 7] = [
        DropReason::BufferFull,
        DropReason::SpoolFull,
        DropReason::SpoolFailed,
        DropReason::SpoolCorrupt,
        DropReason::ShutdownTimeout,
        DropReason::SinkStopped,
        DropReason::Rejected,
    ];

    /// Label value in metrics and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            DropReason::BufferFull => "buffer_full",
            DropReason::SpoolFull => "spool_full",
            DropReason::SpoolFailed => "spool_failed",
            DropReason::SpoolCorrupt => "spool_corrupt",
            DropReason::ShutdownTimeout => "shutdown_timeout",
            DropReason::SinkStopped => "sink_stopped",
            DropReason::Rejected => "rejected",
        }
    }

    /// Whether the drop was asked for by configuration (a `drop_*` policy or a size limit).
    pub fn intentional(self) -> bool {
        matches!(self, DropReason::BufferFull | DropReason::SpoolFull)
    }

    fn slot(self) -> usize {
        self as usize
    }
}

/// What one sink has done with the events it was given.
#[derive(Debug, Default)]
pub struct SinkStats {
    /// Events offered to the sink (counted by its queue).
    pub received: KindCounters,
    /// Events the destination acknowledged.
    pub delivered: KindCounters,
    /// Events dropped before the destination, by [`DropReason`].
    dropped: [KindCounters; 7],
    /// Events written to the spool.
    pub spooled: KindCounters,
    /// Events read back from the spool and handed to the sink.
    pub replayed: KindCounters,
    /// Events in the spool now, by kind.
    spool_pending: [AtomicU64; 3],
    /// Bytes in the spool now.
    pub spool_bytes: AtomicU64,
    /// Events the sink's selection (`kinds`, `cuda_filter`) left out; not part of `received`.
    pub filtered: KindCounters,
    /// Events waiting in the queue now.
    pub queued_events: AtomicU64,
    /// Events waiting in the queue now, by kind.
    queued_by_kind: [AtomicU64; 3],
    /// Bytes waiting in the queue now.
    pub queued_bytes: AtomicU64,
    /// Events lost to a destination error (e.g. a Parquet file that could not be written).
    pub failed: KindCounters,
    /// Set while the destination fails (from a rejected batch until the next delivery).
    unhealthy: AtomicBool,
    /// Events whose delivery attempt ended in an error, by error label (a retried event
    /// counts once per failed attempt).
    errors: Mutex<BTreeMap<String, u64>>,
}

impl SinkStats {
    /// Counts `events` of `kind` dropped for `reason`.
    pub fn drop_events(&self, reason: DropReason, kind: EventKind, events: u64) {
        self.dropped[reason.slot()].add(kind, events);
    }

    /// Events of `kind` dropped for `reason`.
    pub fn dropped(&self, reason: DropReason, kind: EventKind) -> u64 {
        self.dropped[reason.slot()].get(kind)
    }

    /// Sets the events of `kind` now in the spool.
    pub fn set_spool_pending(&self, kind: EventKind, events: u64) {
        self.spool_pending[KindCounters::slot(kind)].store(events, Ordering::Relaxed);
    }

    /// Sets the events of `kind` waiting in the queue now.
    pub fn set_queued_events(&self, kind: EventKind, events: u64) {
        self.queued_by_kind[KindCounters::slot(kind)].store(events, Ordering::Relaxed);
    }

    /// Events of `kind` waiting in the queue now.
    pub fn queued_events_of(&self, kind: EventKind) -> u64 {
        self.queued_by_kind[KindCounters::slot(kind)].load(Ordering::Relaxed)
    }

    /// Events of `kind` now in the spool.
    pub fn spool_pending(&self, kind: EventKind) -> u64 {
        self.spool_pending[KindCounters::slot(kind)].load(Ordering::Relaxed)
    }

    /// Records whether the destination is failing now.
    pub fn set_healthy(&self, healthy: bool) {
        self.unhealthy.store(!healthy, Ordering::Relaxed);
    }

    /// False while the destination fails.
    pub fn healthy(&self) -> bool {
        !self.unhealthy.load(Ordering::Relaxed)
    }

    /// Counts `events` whose delivery attempt failed with `error` (a short stable label such
    /// as `msg_timed_out` or `grpc_unavailable`).
    pub fn count_error(&self, error: &str, events: u64) {
        let mut errors = self.errors.lock().unwrap_or_else(|e| e.into_inner());
        match errors.get_mut(error) {
            Some(count) => *count += events,
            None => {
                errors.insert(error.to_string(), events);
            }
        }
    }

    /// Failed-attempt counts by error label.
    pub fn errors(&self) -> BTreeMap<String, u64> {
        self.errors
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Events of `kind` dropped for any reason.
    pub fn dropped_total(&self, kind: EventKind) -> u64 {
        DropReason::ALL.iter().map(|&r| self.dropped(r, kind)).sum()
    }

    /// Events received but not yet delivered, dropped, failed or spooled (queued in memory, in
    /// an open file, in a request on the wire, ...).
    pub fn in_flight(&self, kind: EventKind) -> u64 {
        self.received.get(kind).saturating_sub(
            self.delivered.get(kind)
                + self.dropped_total(kind)
                + self.failed.get(kind)
                + self.spool_pending(kind),
        )
    }
}

/// What a running sink consumes.
#[derive(Debug)]
pub struct SinkInput {
    /// Batches to deliver; closed by the pipeline at shutdown.
    pub batches: QueueReceiver,
    /// Where the sink counts its work.
    pub stats: Arc<SinkStats>,
}

/// The future a sink's run returns.
pub type SinkRun = Pin<Box<dyn Future<Output = Result<(), SinkError>> + Send>>;

/// Runs the body of a sink that does blocking work (file I/O, encoding) on the runtime's
/// blocking pool, handing it the runtime so it can await its queue; a panic in the body ends
/// the sink with a [`SinkError::Worker`].
pub async fn run_blocking(
    sink: String,
    body: impl FnOnce(tokio::runtime::Handle) + Send + 'static,
) -> Result<(), SinkError> {
    let handle = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || body(handle))
        .await
        .map_err(|err| SinkError::Worker {
            sink,
            reason: err.to_string(),
        })
}

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
        stats.drop_events(DropReason::BufferFull, EventKind::Cuda, 2);
        assert_eq!(stats.dropped_total(EventKind::Cuda), 2);
        assert_eq!(stats.in_flight(EventKind::Cuda), 1);
        assert_eq!(stats.in_flight(EventKind::Xid), 2);
        assert_eq!(stats.received.total(), 12);
    }

    #[test]
    fn errors_and_health_are_recorded() {
        let stats = SinkStats::default();
        assert!(stats.healthy());
        stats.set_healthy(false);
        assert!(!stats.healthy());
        stats.count_error("msg_timed_out", 3);
        stats.count_error("msg_timed_out", 2);
        stats.count_error("grpc_unavailable", 1);
        let errors = stats.errors();
        assert_eq!(errors.get("msg_timed_out"), Some(&5));
        assert_eq!(errors.get("grpc_unavailable"), Some(&1));
        assert_eq!(errors.len(), 2);
    }
}
