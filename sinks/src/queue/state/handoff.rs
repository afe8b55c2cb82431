//! What the queue handed to its sink and what the sink handed back, by kind, and the times the
//! stall check needs: the last progress, and since when the sink holds a kept event (an XID)
//! unsettled.

use std::time::{Duration, Instant};

use enum_map::EnumMap;

use crate::stats::{DropReason, SinkStats};
use crate::{EventKind, Retention};

#[derive(Debug)]
pub(crate) struct Handoff {
    handed: EnumMap<EventKind, u64>,
    returned: EnumMap<EventKind, u64>,
    /// The last take or acknowledgement (or the start).
    last_progress: Instant,
    /// Since when the sink holds events of a kept kind it has not settled.
    kept_unsettled_since: Option<Instant>,
    /// How long the sink may hold an XID unsettled on purpose (see `holds_xids_for`).
    xid_hold: Duration,
}

impl Handoff {
    pub(crate) fn new(now: Instant) -> Self {
        Self {
            handed: EnumMap::default(),
            returned: EnumMap::default(),
            last_progress: now,
            kept_unsettled_since: None,
            xid_hold: Duration::ZERO,
        }
    }

    /// Counts `events` of `kind` handed to the sink at `now`.
    pub(crate) fn hand(&mut self, kind: EventKind, events: usize, now: Instant) {
        self.handed[kind] += events as u64;
        self.last_progress = now;
        if kind.retention() == Retention::Kept && self.kept_unsettled_since.is_none() {
            self.kept_unsettled_since = Some(now);
        }
    }

    /// Counts `events` of `kind` the sink handed back (rejected, to be retried).
    pub(crate) fn hand_back(&mut self, kind: EventKind, events: usize) {
        self.returned[kind] += events as u64;
    }

    /// Events of `kind` handed to the sink that it has not yet settled (delivered, failed,
    /// refused or handed back).
    pub(crate) fn in_sink(&self, stats: &SinkStats, kind: EventKind) -> u64 {
        let settled = stats.delivered.get(kind)
            + stats.failed.get(kind)
            + stats.dropped(DropReason::Rejected, kind);
        self.handed[kind]
            .saturating_sub(self.returned[kind])
            .saturating_sub(settled)
    }

    /// The sink made progress at `now` (it acknowledged something).
    pub(crate) fn progress(&mut self, now: Instant) {
        self.last_progress = now;
    }

    pub(crate) fn last_progress(&self) -> Instant {
        self.last_progress
    }

    /// The sink settled every kept event it was handed.
    pub(crate) fn kept_settled(&mut self) {
        self.kept_unsettled_since = None;
    }

    /// Whether a kept event handed at some time is still unsettled `limit` past the sink's own
    /// hold, at `now`.
    pub(crate) fn kept_overdue(&self, now: Instant, limit: Duration) -> bool {
        self.kept_unsettled_since.is_some_and(|since| {
            now.saturating_duration_since(since) >= limit.saturating_add(self.xid_hold)
        })
    }

    /// The sink keeps XIDs up to `hold` on purpose before it acknowledges them.
    pub(crate) fn hold_xids_for(&mut self, hold: Duration) {
        self.xid_hold = hold;
    }
}
