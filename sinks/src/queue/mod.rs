//! The bounded queue in front of every sink: its `when_full` policy, the XID lane, the disk
//! spool for outages, and the shutdown deadline.
//!
//! Producers are plain threads and send with [`QueueSender::send_blocking`]; the sink receives
//! with the async [`QueueReceiver::recv`] and reports each batch it could not deliver with
//! [`QueueReceiver::reject`] (retried after a backoff) or success with
//! [`QueueReceiver::delivered`].
//!
//! - XID batches have their own lane: taken first, never dropped by policy, admitted even when
//!   the queue is full.
//! - CUDA batches obey `when_full`: `block` waits for room (the pipeline slows and any loss
//!   happens, counted, in the kernel ring); `drop_newest` drops the incoming batch;
//!   `drop_oldest` drops the oldest queued ones; both count `buffer_full`.
//! - With a spool, a full memory queue spills to disk instead of waiting, whatever the policy:
//!   capture waits (`block`) or drops (`drop_*`) only when memory and spool are both full, or
//!   when there is no spool. Once the spool holds anything, every new CUDA/driver batch goes
//!   behind it, so order is kept; it is replayed, oldest first, once memory is empty, and
//!   survives restarts. A full spool drops CUDA and driver batches (`spool_full`, by the
//!   policy), never XIDs.
//! - A sink that holds work but has acknowledged nothing for `stall_timeout_ms` is *stalled*:
//!   unhealthy, and every batch spilled meanwhile is counted as a failed attempt (`stalled`).
//!   This is what makes a destination that stops answering without failing (a Kafka broker
//!   that is down while librdkafka retries) spill to the spool instead of stopping capture.
//! - XIDs are written ahead to the sink's XID journal (`<spool>/xid-journal`, fsynced) as they
//!   arrive, stay in the memory XID lane (never behind the spool), and their journal entry is
//!   deleted once the sink has settled every XID it was handed. A crash or SIGKILL therefore
//!   loses no XID: the next run replays the journal first.
//! - When every sender is gone the queue closes; the sink drains it. If that takes longer than
//!   the shutdown timeout, what is left goes to the spool.
//!
//! Every event offered is counted as received here, so for each sink
//! `received = delivered + dropped + failed + spooled_pending + in_flight`.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};
use enum_map::EnumMap;
use tokio::sync::Notify;

use crate::spool::Spool;
use crate::stats::{DropReason, SinkStats};
use crate::{EventBatch, EventKind, Retention};

/// Retry delays after a failed delivery: doubling from the first to the last, each with a
/// random jitter of up to itself added (capped at the last), so sinks that failed together
/// do not retry in step.
pub(crate) const BACKOFF_FIRST: Duration = Duration::from_millis(500);
pub(crate) const BACKOFF_MAX: Duration = Duration::from_secs(30);

/// A fresh series of retry delays (after a delivery succeeded, or at start).
pub(crate) fn retry_delays() -> ExponentialBackoff {
    ExponentialBuilder::default()
        .with_min_delay(BACKOFF_FIRST)
        .with_max_delay(BACKOFF_MAX)
        .with_factor(2.0)
        .with_jitter()
        .without_max_times()
        .build()
}

/// A batch waiting in memory.
#[derive(Debug)]
pub(crate) struct Queued {
    pub(crate) batch: EventBatch,
    /// Arrow memory of the batch.
    pub(crate) bytes: usize,
    /// Its XID journal entry, for XID batches of a journaled queue.
    pub(crate) journal: Option<u64>,
}

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
    /// XIDs written ahead, until the sink settles them (only with a spool).
    pub(crate) journal: Option<Spool>,
    /// Journal entries of XID batches handed to the sink and not yet known settled.
    pub(crate) journal_handed: Vec<u64>,
    /// Events handed to the sink (taken), and handed back by it (rejected), by kind.
    pub(crate) handed: EnumMap<EventKind, u64>,
    pub(crate) returned: EnumMap<EventKind, u64>,
    /// The last take or acknowledgement (or the start), for stall detection.
    pub(crate) last_progress: Instant,
    /// Since when the sink holds XIDs it has not settled.
    pub(crate) xid_unsettled_since: Option<Instant>,
    /// Set while the sink holds work and acknowledges nothing for the stall timeout.
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
    }

    pub(crate) fn has_room(&self, config: &BufferConfig, events: usize, bytes: usize) -> bool {
        // An oversized batch is still admitted into an empty queue, or nothing could pass.
        self.events == 0
            || (self.events + events <= config.max_events && self.bytes + bytes <= config.max_bytes)
    }

    pub(crate) fn spool_backlog(&self) -> bool {
        self.spool.as_ref().is_some_and(|s| !s.is_empty())
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
        if kind == EventKind::Xid && self.xid_unsettled_since.is_none() {
            self.xid_unsettled_since = Some(now);
        }
    }
}

#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) name: String,
    pub(crate) state: Mutex<State>,
    pub(crate) room: Condvar,
    pub(crate) ready: Notify,
    pub(crate) config: BufferConfig,
    pub(crate) shutdown_timeout: Duration,
    pub(crate) stats: Arc<SinkStats>,
    pub(crate) spool_warning: Mutex<RateLimit>,
    pub(crate) journal_warning: Mutex<RateLimit>,
}

impl Shared {
    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves consistent counters; keep going.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(crate) fn publish(&self, state: &State) {
        self.stats
            .queued_events
            .store(state.events as u64, Ordering::Relaxed);
        self.stats
            .queued_bytes
            .store(state.bytes as u64, Ordering::Relaxed);
        for (kind, &events) in &state.events_by_kind {
            self.stats.set_queued_events(kind, events);
        }
        if let Some(spool) = &state.spool {
            for kind in EventKind::all() {
                self.stats
                    .set_spool_pending(kind, spool.pending_events(kind));
            }
            self.stats
                .spool_bytes
                .store(spool.bytes(), Ordering::Relaxed);
        }
    }

    /// Marks the sink stalled when events wait in memory and it took or acknowledged nothing
    /// for the stall timeout, or when it has held an XID unsettled that long (a sink may keep
    /// CUDA rows for minutes, in an open Parquet file, but settles XIDs within seconds); true
    /// while stalled.
    pub(crate) fn check_stall(&self, state: &mut State, now: Instant) -> bool {
        if state.stalled {
            return true;
        }
        let timeout = self.config.stall_timeout();
        let quiet = now.saturating_duration_since(state.last_progress);
        let waiting = state.events > 0 && quiet >= timeout;
        let xid_held = state
            .xid_unsettled_since
            .is_some_and(|since| now.saturating_duration_since(since) >= timeout);
        if waiting || xid_held {
            state.stalled = true;
            state.sink_healthy = false;
            self.stats.set_healthy(false);
            tracing::warn!(sink = %self.name, quiet_ms = quiet.as_millis() as u64, "sink stalled: no acknowledgement while holding events; spooling what does not fit in memory");
        }
        state.stalled
    }

    /// Logs `message` with `err` at most once per [`WARN_INTERVAL`] per `slot`, with the number
    /// of repeats held back.
    pub(crate) fn warn_limited(
        &self,
        slot: &Mutex<RateLimit>,
        message: &str,
        err: &dyn std::fmt::Display,
    ) {
        let mut limit = slot.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        if limit
            .last
            .is_some_and(|last| now.saturating_duration_since(last) < WARN_INTERVAL)
        {
            limit.suppressed += 1;
            return;
        }
        let suppressed = std::mem::take(&mut limit.suppressed);
        limit.last = Some(now);
        tracing::error!(sink = %self.name, %err, suppressed, "{message}");
    }

    /// Writes `batch` to the spool (the caller checked it is enabled), applying the policy when
    /// the spool is full: droppable batches (CUDA, driver) are dropped (`drop_oldest` drops old
    /// droppable segments instead), XIDs are always kept.
    /// True when the batch is on disk.
    pub(crate) fn spool_store(&self, state: &mut State, batch: EventBatch, bytes: usize) -> bool {
        let kind = batch.kind;
        let events = batch.len() as u64;
        let Some(spool) = state.spool.as_mut() else {
            self.stats
                .drop_events(DropReason::SinkStopped, kind, events);
            return false;
        };
        if kind.droppable() && !spool.has_room(bytes as u64) {
            if self.config.when_full == WhenFull::DropOldest {
                while !spool.has_room(bytes as u64) {
                    let Some((dropped_kind, dropped)) = spool.drop_oldest_droppable() else {
                        break;
                    };
                    self.stats
                        .drop_events(DropReason::SpoolFull, dropped_kind, dropped);
                }
            }
            if !spool.has_room(bytes as u64) {
                self.stats.drop_events(DropReason::SpoolFull, kind, events);
                return false;
            }
        }
        match spool.store(&batch) {
            Ok(_) => {
                self.stats.spooled.add(kind, events);
                true
            }
            Err(err) => {
                self.warn_limited(&self.spool_warning, "cannot spool; events dropped", &err);
                self.stats
                    .drop_events(DropReason::SpoolFailed, kind, events);
                false
            }
        }
    }
}

/// Repeated warnings are logged at most this often (with the count held back).
pub(crate) const WARN_INTERVAL: Duration = Duration::from_secs(10);

/// When a repeated warning was last logged, and how many were held back since.
#[derive(Debug, Default)]
pub(crate) struct RateLimit {
    last: Option<Instant>,
    suppressed: u64,
}

/// The producer side; clone one per producer thread. The queue closes when all are dropped.
#[derive(Debug)]
pub struct QueueSender {
    pub(crate) shared: Arc<Shared>,
}

/// The sink side.
#[derive(Debug)]
pub struct QueueReceiver {
    pub(crate) shared: Arc<Shared>,
}

/// How a queue is set up.
#[derive(Debug)]
pub struct QueueOptions {
    /// Sink name, for logs.
    pub name: String,
    /// Memory bounds and policy.
    pub buffer: BufferConfig,
    /// The sink's spool, if it has one (already opened: its old segments are replayed first).
    pub spool: Option<Spool>,
    /// How long the sink may drain after the queue closes before the rest is spooled.
    pub shutdown_timeout: Duration,
}

/// A queue for one sink, counting into `stats`.
pub fn queue_with(options: QueueOptions, stats: Arc<SinkStats>) -> (QueueSender, QueueReceiver) {
    let mut spool = options.spool;
    // Segments left by a previous run are offered to this run's sink; corrupt ones are
    // counted as offered and dropped, so the identities still hold.
    if let Some(spool) = spool.as_mut() {
        count_corrupt_at_open(&options.name, spool, &stats);
        for kind in EventKind::all() {
            stats.received.add(kind, spool.pending_events(kind));
            stats.spooled.add(kind, spool.pending_events(kind));
        }
    }
    let journal = spool
        .as_ref()
        .and_then(|spool| open_journal(&options.name, spool, &stats));
    let mut state = State {
        xid: VecDeque::new(),
        cuda: VecDeque::new(),
        events: 0,
        events_by_kind: EnumMap::default(),
        bytes: 0,
        senders: 1,
        receiver_alive: true,
        spool,
        journal: None,
        journal_handed: Vec::new(),
        handed: EnumMap::default(),
        returned: EnumMap::default(),
        last_progress: Instant::now(),
        xid_unsettled_since: None,
        stalled: false,
        sink_healthy: true,
        backoff: retry_delays(),
        retry_at: None,
        closed_at: None,
    };
    if let Some(journal) = journal {
        replay_journal(&options.name, journal, &mut state, &stats);
    }
    let shared = Arc::new(Shared {
        name: options.name,
        state: Mutex::new(state),
        room: Condvar::new(),
        ready: Notify::new(),
        config: options.buffer,
        shutdown_timeout: options.shutdown_timeout,
        stats,
        spool_warning: Mutex::new(RateLimit::default()),
        journal_warning: Mutex::new(RateLimit::default()),
    });
    shared.publish(&shared.lock());
    (
        QueueSender {
            shared: shared.clone(),
        },
        QueueReceiver { shared },
    )
}

/// A memory-only queue (no spool), for tests and sinks that opt out of spooling.
pub fn queue(buffer: BufferConfig, stats: Arc<SinkStats>) -> (QueueSender, QueueReceiver) {
    let options = QueueOptions {
        name: "sink".into(),
        buffer,
        spool: None,
        shutdown_timeout: Duration::from_secs(30),
    };
    queue_with(options, stats)
}

mod config;
mod journal;
mod receiver;
mod sender;

pub use config::{BufferConfig, WhenFull, STALL_TIMEOUT_MS_RANGE};
use journal::{count_corrupt_at_open, open_journal, replay_journal};
pub use journal::{journaled_xids, JOURNAL_DIR};

#[cfg(test)]
mod tests;
