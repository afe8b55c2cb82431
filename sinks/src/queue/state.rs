//! The state of a sink's queue behind its lock: the XID and CUDA lanes in memory, the spool
//! and its spill lane, the XID journal, and what was handed to the sink.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use backon::ExponentialBackoff;
use enum_map::EnumMap;

use super::spill::Writing;
use super::{BufferConfig, Queued};
use crate::spool::Spool;
use crate::stats::{DropReason, SinkStats};
use crate::{EventKind, Retention};

#[derive(Debug)]
pub(crate) struct State {
    pub(crate) xid: VecDeque<Queued>,
    pub(crate) cuda: VecDeque<Queued>,
    pub(crate) events: usize,
    /// `events` by kind (kept as batches come and go, so publishing is not a scan).
    pub(crate) events_by_kind: EnumMap<EventKind, u64>,
    pub(crate) bytes: usize,
    pub(crate) senders: usize,
    pub(crate) receiver_alive: bool,
    pub(crate) spool: Option<Spool>,
    /// Batches bound for the spool that its writer thread has not taken yet (see `spill`).
    pub(crate) spilling: VecDeque<Queued>,
    pub(crate) spilling_bytes: usize,
    pub(crate) spilling_by_kind: EnumMap<EventKind, u64>,
    /// The batch the writer thread is writing now.
    pub(crate) writing: Option<Writing>,
    /// False when the writer thread could not start: the producer then writes the spool.
    pub(crate) spool_writer: bool,
    /// XIDs written ahead, until the sink settles them (only with a spool).
    pub(crate) journal: Option<Spool>,
    /// Journal entries of XID batches handed to the sink and not yet known settled.
    pub(crate) journal_handed: Vec<u64>,
    /// Events handed to the sink (taken), and handed back by it (rejected), by kind.
    pub(crate) handed: EnumMap<EventKind, u64>,
    pub(crate) returned: EnumMap<EventKind, u64>,
    /// The last take or acknowledgement (or the start), for stall detection.
    pub(crate) last_progress: Instant,
    /// Since when the sink holds events of a kept kind (XIDs) it has not settled.
    pub(crate) kept_unsettled_since: Option<Instant>,
    /// How long the sink may hold an XID unsettled on purpose (see `holds_xids_for`).
    pub(crate) xid_hold: Duration,
    /// Since when work waits in memory (None while memory is empty), for stall detection.
    pub(crate) waiting_since: Option<Instant>,
    /// Set while an acknowledgement is overdue (see `Shared::check_stall`).
    pub(crate) stalled: bool,
    /// False from a rejected batch until the next delivered one.
    pub(crate) sink_healthy: bool,
    /// The delays of the retries to come.
    pub(crate) backoff: ExponentialBackoff,
    pub(crate) retry_at: Option<Instant>,
    pub(crate) closed_at: Option<Instant>,
}

impl State {
    pub(crate) fn push(&mut self, queued: Queued, front: bool) {
        if self.events == 0 {
            self.waiting_since = Some(Instant::now());
        }
        self.events += queued.batch.len();
        self.events_by_kind[queued.batch.kind] += queued.batch.len() as u64;
        self.bytes += queued.bytes;
        // Droppable kinds (CUDA, driver) share the policy-governed lane.
        let lane = match queued.batch.kind.retention() {
            Retention::Kept => &mut self.xid,
            Retention::Droppable => &mut self.cuda,
        };
        if front {
            lane.push_front(queued);
        } else {
            lane.push_back(queued);
        }
    }

    pub(crate) fn pop(&mut self) -> Option<Queued> {
        let queued = self.xid.pop_front().or_else(|| self.cuda.pop_front())?;
        self.forget(&queued);
        Some(queued)
    }

    /// Takes the oldest XID batch only.
    pub(crate) fn pop_xid(&mut self) -> Option<Queued> {
        let queued = self.xid.pop_front()?;
        self.forget(&queued);
        Some(queued)
    }

    /// Takes the oldest CUDA/driver batch only (dropped by `drop_oldest`).
    pub(crate) fn pop_oldest_cuda(&mut self) -> Option<Queued> {
        let queued = self.cuda.pop_front()?;
        self.forget(&queued);
        Some(queued)
    }

    /// Uncounts a batch that left memory.
    fn forget(&mut self, queued: &Queued) {
        self.events -= queued.batch.len();
        self.events_by_kind[queued.batch.kind] -= queued.batch.len() as u64;
        self.bytes -= queued.bytes;
        if self.events == 0 {
            self.waiting_since = None;
        }
    }

    pub(crate) fn has_room(&self, config: &BufferConfig, events: usize, bytes: usize) -> bool {
        // An oversized batch is still admitted into an empty queue, or nothing could pass.
        self.events == 0
            || (self.events + events <= config.max_events && self.bytes + bytes <= config.max_bytes)
    }

    /// Whether anything is spooled or on its way to the spool (order: new batches go behind).
    pub(crate) fn spool_backlog(&self) -> bool {
        self.spool.as_ref().is_some_and(|s| !s.is_empty())
            || !self.spilling.is_empty()
            || self.writing.is_some()
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

    /// Counts `events` of `kind` handed to the sink.
    pub(crate) fn hand(&mut self, kind: EventKind, events: usize, now: Instant) {
        self.handed[kind] += events as u64;
        self.last_progress = now;
        if kind.retention() == Retention::Kept && self.kept_unsettled_since.is_none() {
            self.kept_unsettled_since = Some(now);
        }
    }
}
