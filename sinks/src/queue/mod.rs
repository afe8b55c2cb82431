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
//!   when there is no spool. The spool is written by its own thread behind a bounded spill
//!   lane (see [`spill`]), so the producer never waits for the disk. Once the spool holds anything, every new CUDA/driver batch goes
//!   behind it, so order is kept; it is replayed, oldest first, once memory is empty, and
//!   survives restarts. A full spool drops CUDA and driver batches (`spool_full`, by the
//!   policy), never XIDs.
//! - A sink that owes an acknowledgement for longer than `stall_timeout_ms` is *stalled*: work
//!   waits in memory and the sink has taken and acknowledged nothing for that long, or an XID
//!   it was handed is unsettled for that long beyond what the sink says it holds XIDs (see
//!   [`Shared::check_stall`]). Stalled is unhealthy, and every batch spilled meanwhile is
//!   counted as a failed attempt (`stalled`). Rows a sink keeps on purpose (an open Parquet
//!   file waiting for its age) are not a stall.
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

use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};
use tokio::sync::Notify;

use crate::spool::Spool;
use crate::stats::SinkStats;
use crate::{EventBatch, EventKind};

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
pub(crate) struct Shared {
    pub(crate) name: String,
    pub(crate) state: Mutex<State>,
    pub(crate) room: Condvar,
    pub(crate) ready: Notify,
    /// Wakes the spool's writer thread.
    pub(crate) spill_ready: Condvar,
    /// Held by a test to stall the writer thread before each write, as a stalled disk does.
    #[cfg(test)]
    pub(crate) writer_gate: Mutex<()>,
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

    /// Publishes the queue's gauges; batches on their way to the spool count as queued.
    pub(crate) fn publish(&self, state: &State) {
        let (memory, disk) = (&state.memory, &state.disk);
        let unwritten: u64 = EventKind::all().map(|kind| disk.unwritten(kind)).sum();
        self.stats
            .queued_events
            .store(memory.events() as u64 + unwritten, Ordering::Relaxed);
        self.stats.queued_bytes.store(
            (memory.bytes() + disk.lane_bytes()) as u64,
            Ordering::Relaxed,
        );
        for kind in EventKind::all() {
            self.stats
                .set_queued_events(kind, memory.events_of(kind) + disk.unwritten(kind));
        }
        if let Some(spool) = disk.spool() {
            for kind in EventKind::all() {
                self.stats
                    .set_spool_pending(kind, spool.pending_events(kind));
            }
            self.stats
                .spool_bytes
                .store(spool.bytes(), Ordering::Relaxed);
        }
    }

    /// Whether the sink is stalled: an acknowledgement it owes is overdue. That is work
    /// waiting in memory that the sink has neither taken nor made room for by acknowledging
    /// anything for the stall timeout (a sink blocked in a write, an fsync or a send), or an
    /// XID handed to it and unsettled for longer than the sink says it holds XIDs (its
    /// [`QueueReceiver::holds_xids_for`], 0 unless it batches XIDs) plus the stall timeout.
    /// Rows a sink keeps on purpose (a Parquet file open until its age) are not waiting for
    /// anything, so they never make it stalled. Evaluated afresh at every check: a stall ends
    /// when its cause does. True while stalled.
    pub(crate) fn check_stall(&self, state: &mut State, now: Instant) -> bool {
        let timeout = self.config.stall_timeout();
        let last_progress = state.handoff.last_progress();
        let quiet = state
            .memory
            .waiting_since()
            .map(|since| now.saturating_duration_since(since.max(last_progress)));
        let waiting = quiet.is_some_and(|quiet| quiet >= timeout);
        let xid_overdue = state.handoff.kept_overdue(now, timeout);
        let stalled = waiting || xid_overdue;
        if state.health.set_stalled(stalled) {
            self.stats.set_healthy(state.health.healthy());
            if stalled {
                let quiet_ms = quiet.unwrap_or_default().as_millis() as u64;
                tracing::warn!(sink = %self.name, quiet_ms, xid_overdue, "sink stalled: an acknowledgement is overdue; spooling what does not fit in memory");
            } else {
                tracing::info!(sink = %self.name, "sink no longer stalled");
            }
        }
        stalled
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
        count_corrupt_at_open(&options.name, spool, &stats, EventKind::Cuda);
        for kind in EventKind::all() {
            stats.received.add(kind, spool.pending_events(kind));
            stats.spooled.add(kind, spool.pending_events(kind));
        }
    }
    let journal = spool
        .as_ref()
        .and_then(|spool| open_journal(&options.name, spool, &stats));
    let mut state = State::new(spool, Instant::now());
    if let Some(journal) = journal {
        replay_journal(&options.name, journal, &mut state, &stats);
    }
    let shared = Arc::new(Shared {
        name: options.name,
        state: Mutex::new(state),
        room: Condvar::new(),
        ready: Notify::new(),
        spill_ready: Condvar::new(),
        #[cfg(test)]
        writer_gate: Mutex::new(()),
        config: options.buffer,
        shutdown_timeout: options.shutdown_timeout,
        stats,
        spool_warning: Mutex::new(RateLimit::default()),
        journal_warning: Mutex::new(RateLimit::default()),
    });
    shared.publish(&shared.lock());
    if shared.lock().disk.spool().is_some() {
        let writer = shared.clone();
        let spawned = std::thread::Builder::new()
            .name("gpuship-spool".into())
            .spawn(move || spill::write_spilled(writer));
        if let Err(err) = spawned {
            // Without the thread the queue spools on the producer's thread, as it used to.
            tracing::error!(sink = %shared.name, %err, "cannot start the spool writer thread; spooling on the capture thread");
            shared.lock().disk.without_writer_thread();
        }
    }
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
mod spill;
mod state;

pub(crate) use state::State;

pub use config::{BufferConfig, WhenFull, STALL_TIMEOUT_MS_RANGE};
use journal::{count_corrupt_at_open, open_journal, replay_journal};
pub use journal::{journaled_xids, JOURNAL_DIR};

#[cfg(test)]
mod corrupt_journal_tests;
#[cfg(test)]
mod spill_full_tests;
#[cfg(test)]
mod spill_tests;
#[cfg(test)]
mod spool_tests;
#[cfg(test)]
mod stall_tests;
#[cfg(test)]
mod test_helpers;
#[cfg(test)]
mod tests;
