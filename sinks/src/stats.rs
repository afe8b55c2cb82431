//! What each sink has done with the events it was given: per-kind counters, drop reasons and
//! [`SinkStats`], the numbers behind `/metrics` and the end-of-run accounting.
//!
//! Both the queue (which counts what was offered, dropped and spooled) and the sinks (which
//! count what was delivered or failed) write here; this module depends on neither, so the two
//! do not import each other. Every table is indexed by [`EventKind`] or [`DropReason`]
//! ([`enum_map::EnumMap`]), so a new kind or reason has its counters without a change here.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use enum_map::EnumMap;
use serde::Serialize;

use crate::EventKind;

/// A counter per event kind.
#[derive(Debug, Default)]
pub struct KindCounters(EnumMap<EventKind, AtomicU64>);

impl KindCounters {
    /// Adds `n` events of `kind`.
    pub fn add(&self, kind: EventKind, n: u64) {
        self.0[kind].fetch_add(n, Ordering::Relaxed);
    }

    /// The count for one kind.
    pub fn get(&self, kind: EventKind) -> u64 {
        self.0[kind].load(Ordering::Relaxed)
    }

    /// The count over all kinds.
    pub fn total(&self) -> u64 {
        self.0
            .values()
            .map(|count| count.load(Ordering::Relaxed))
            .sum()
    }
}

/// Why events were dropped before reaching a sink's destination.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Serialize,
    enum_map::Enum,
    strum::EnumIter,
    strum::IntoStaticStr,
    strum::VariantArray,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
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
    /// Every reason, in declaration order (derived: a new variant is in it).
    pub const ALL: &'static [DropReason] = <DropReason as strum::VariantArray>::VARIANTS;

    /// Every reason, in declaration order.
    pub fn all() -> impl Iterator<Item = DropReason> + Clone {
        <DropReason as strum::IntoEnumIterator>::iter()
    }

    /// Label value in metrics and logs.
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// Whether the drop was asked for by configuration (a `drop_*` policy or a size limit).
    pub fn intentional(self) -> bool {
        matches!(self, DropReason::BufferFull | DropReason::SpoolFull)
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
    dropped: EnumMap<DropReason, KindCounters>,
    /// Events written to the spool.
    pub spooled: KindCounters,
    /// Events read back from the spool and handed to the sink.
    pub replayed: KindCounters,
    /// Events in the spool now, by kind.
    spool_pending: EnumMap<EventKind, AtomicU64>,
    /// Bytes in the spool now.
    pub spool_bytes: AtomicU64,
    /// Spool and XID-journal segments set aside as corrupt. Their events are counted as
    /// dropped (`spool_corrupt`): the header's count where it is readable, else one per
    /// segment (at least one was lost), so this counter says how many segments that covers.
    pub spool_corrupt_segments: AtomicU64,
    /// Events the sink's selection (`kinds`, `cuda_filter`) left out; not part of `received`.
    pub filtered: KindCounters,
    /// Events waiting in the queue now.
    pub queued_events: AtomicU64,
    /// Events waiting in the queue now, by kind.
    queued_by_kind: EnumMap<EventKind, AtomicU64>,
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
        self.dropped[reason].add(kind, events);
    }

    /// Counts one corrupt spool or journal segment whose `events` of `kind` are lost.
    pub fn drop_corrupt_segment(&self, kind: EventKind, events: u64) {
        self.spool_corrupt_segments.fetch_add(1, Ordering::Relaxed);
        self.drop_events(DropReason::SpoolCorrupt, kind, events);
    }

    /// Corrupt spool and journal segments set aside so far.
    pub fn corrupt_segments(&self) -> u64 {
        self.spool_corrupt_segments.load(Ordering::Relaxed)
    }

    /// Events of `kind` dropped for `reason`.
    pub fn dropped(&self, reason: DropReason, kind: EventKind) -> u64 {
        self.dropped[reason].get(kind)
    }

    /// Sets the events of `kind` now in the spool.
    pub fn set_spool_pending(&self, kind: EventKind, events: u64) {
        self.spool_pending[kind].store(events, Ordering::Relaxed);
    }

    /// Sets the events of `kind` waiting in the queue now.
    pub fn set_queued_events(&self, kind: EventKind, events: u64) {
        self.queued_by_kind[kind].store(events, Ordering::Relaxed);
    }

    /// Events of `kind` waiting in the queue now.
    pub fn queued_events_of(&self, kind: EventKind) -> u64 {
        self.queued_by_kind[kind].load(Ordering::Relaxed)
    }

    /// Events of `kind` now in the spool.
    pub fn spool_pending(&self, kind: EventKind) -> u64 {
        self.spool_pending[kind].load(Ordering::Relaxed)
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
        DropReason::all().map(|r| self.dropped(r, kind)).sum()
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
    fn every_kind_and_reason_has_its_own_counter() {
        let stats = SinkStats::default();
        for (n, kind) in EventKind::all().enumerate() {
            for (m, reason) in DropReason::all().enumerate() {
                stats.drop_events(reason, kind, (n * 10 + m + 1) as u64);
            }
            stats.set_spool_pending(kind, n as u64 + 100);
            stats.set_queued_events(kind, n as u64 + 200);
        }
        for (n, kind) in EventKind::all().enumerate() {
            for (m, reason) in DropReason::all().enumerate() {
                assert_eq!(stats.dropped(reason, kind), (n * 10 + m + 1) as u64);
            }
            assert_eq!(stats.spool_pending(kind), n as u64 + 100);
            assert_eq!(stats.queued_events_of(kind), n as u64 + 200);
        }
        assert_eq!(DropReason::all().count(), 7);
        assert_eq!(DropReason::ShutdownTimeout.as_str(), "shutdown_timeout");
        let serde_name = serde_json::to_value(DropReason::SpoolCorrupt).unwrap();
        assert_eq!(serde_name, DropReason::SpoolCorrupt.as_str());
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
