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
//! - While the sink is failing, batches that do not fit go to the disk spool instead (and once
//!   the spool holds anything, every new batch goes behind it, so order is kept). The spool is
//!   replayed, oldest first, once memory is empty, and survives restarts. A full spool drops
//!   CUDA batches (`spool_full`, by the policy), never XIDs.
//! - When every sender is gone the queue closes; the sink drains it. If that takes longer than
//!   the shutdown timeout, what is left goes to the spool.
//!
//! Every event offered is counted as received here, so for each sink
//! `received = delivered + dropped + failed + spooled_pending + in_flight`.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde::Deserialize;
use tokio::sync::Notify;

use crate::sink::{DropReason, SinkStats};
use crate::spool::Spool;
use crate::{EventBatch, EventKind};

/// What a full queue does with a CUDA batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum WhenFull {
    /// Wait for room (default).
    #[default]
    Block,
    /// Drop the incoming batch.
    DropNewest,
    /// Drop the oldest queued batches.
    DropOldest,
}

/// `[sinks.buffer]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BufferConfig {
    /// Events queued in memory at most.
    #[serde(default = "default_max_events")]
    pub max_events: usize,
    /// Bytes (Arrow memory) queued in memory at most.
    #[serde(default = "default_max_bytes")]
    pub max_bytes: usize,
    /// Policy when full.
    #[serde(default)]
    pub when_full: WhenFull,
}

fn default_max_events() -> usize {
    1 << 16
}

fn default_max_bytes() -> usize {
    2 << 20
}

impl Default for BufferConfig {
    fn default() -> Self {
        Self {
            max_events: default_max_events(),
            max_bytes: default_max_bytes(),
            when_full: WhenFull::default(),
        }
    }
}

impl BufferConfig {
    /// Every problem with the values, as `(key, message)` pairs (keys relative to the sink).
    pub fn problems(&self) -> Vec<(&'static str, String)> {
        use crate::limits::out_of_range;
        [
            (
                "buffer.max_events",
                out_of_range(self.max_events as u64, 1..=16_777_216),
            ),
            (
                "buffer.max_bytes",
                out_of_range(self.max_bytes as u64, 1..=16 << 30),
            ),
        ]
        .into_iter()
        .filter_map(|(key, message)| Some((key, message?)))
        .collect()
    }
}

/// Retry delays after a failed delivery: doubling from the first to the last.
pub(crate) const BACKOFF_FIRST: Duration = Duration::from_millis(500);
pub(crate) const BACKOFF_MAX: Duration = Duration::from_secs(30);

#[derive(Debug)]
pub(crate) struct State {
    pub(crate) xid: VecDeque<(EventBatch, usize)>,
    pub(crate) cuda: VecDeque<(EventBatch, usize)>,
    pub(crate) events: usize,
    pub(crate) bytes: usize,
    pub(crate) senders: usize,
    pub(crate) receiver_alive: bool,
    pub(crate) spool: Option<Spool>,
    /// False from a rejected batch until the next delivered one.
    pub(crate) sink_healthy: bool,
    pub(crate) backoff: Duration,
    pub(crate) retry_at: Option<Instant>,
    pub(crate) closed_at: Option<Instant>,
}

impl State {
    pub(crate) fn push(&mut self, batch: EventBatch, bytes: usize, front: bool) {
        self.events += batch.len();
        self.bytes += bytes;
        let lane = match batch.kind {
            EventKind::Xid => &mut self.xid,
            // Driver rows share the policy-governed lane with CUDA rows.
            EventKind::Cuda | EventKind::Driver => &mut self.cuda,
        };
        if front {
            lane.push_front((batch, bytes));
        } else {
            lane.push_back((batch, bytes));
        }
    }

    pub(crate) fn pop(&mut self) -> Option<EventBatch> {
        let (batch, bytes) = self.xid.pop_front().or_else(|| self.cuda.pop_front())?;
        self.events -= batch.len();
        self.bytes -= bytes;
        Some(batch)
    }

    pub(crate) fn has_room(&self, config: &BufferConfig, events: usize, bytes: usize) -> bool {
        // An oversized batch is still admitted into an empty queue, or nothing could pass.
        self.events == 0
            || (self.events + events <= config.max_events && self.bytes + bytes <= config.max_bytes)
    }

    pub(crate) fn spool_backlog(&self) -> bool {
        self.spool.as_ref().is_some_and(|s| !s.is_empty())
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
        if let Some(spool) = &state.spool {
            for kind in EventKind::ALL {
                self.stats
                    .set_spool_pending(kind, spool.pending_events(kind));
            }
            self.stats
                .spool_bytes
                .store(spool.bytes(), Ordering::Relaxed);
        }
    }

    /// Writes `batch` to the spool (the caller checked it is enabled), applying the policy when
    /// the spool is full: CUDA batches are dropped (`drop_oldest` drops old segments instead),
    /// XIDs are always kept.
    pub(crate) fn spool_store(&self, state: &mut State, batch: EventBatch, bytes: usize) {
        let kind = batch.kind;
        let events = batch.len() as u64;
        let Some(spool) = state.spool.as_mut() else {
            self.stats
                .drop_events(DropReason::SinkStopped, kind, events);
            return;
        };
        if kind == EventKind::Cuda && !spool.has_room(bytes as u64) {
            if self.config.when_full == WhenFull::DropOldest {
                while !spool.has_room(bytes as u64) {
                    let Some(dropped) = spool.drop_oldest_cuda() else {
                        break;
                    };
                    self.stats
                        .drop_events(DropReason::SpoolFull, EventKind::Cuda, dropped);
                }
            }
            if !spool.has_room(bytes as u64) {
                self.stats.drop_events(DropReason::SpoolFull, kind, events);
                return;
            }
        }
        match spool.store(&batch) {
            Ok(_) => self.stats.spooled.add(kind, events),
            Err(err) => {
                tracing::error!(sink = %self.name, %err, events, "cannot spool; events dropped");
                self.stats
                    .drop_events(DropReason::SpoolFailed, kind, events);
            }
        }
    }
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
    // Segments left by a previous run are offered to this run's sink.
    if let Some(spool) = &options.spool {
        for kind in EventKind::ALL {
            stats.received.add(kind, spool.pending_events(kind));
            stats.spooled.add(kind, spool.pending_events(kind));
        }
    }
    let state = State {
        xid: VecDeque::new(),
        cuda: VecDeque::new(),
        events: 0,
        bytes: 0,
        senders: 1,
        receiver_alive: true,
        spool: options.spool,
        sink_healthy: true,
        backoff: BACKOFF_FIRST,
        retry_at: None,
        closed_at: None,
    };
    let shared = Arc::new(Shared {
        name: options.name,
        state: Mutex::new(state),
        room: Condvar::new(),
        ready: Notify::new(),
        config: options.buffer,
        shutdown_timeout: options.shutdown_timeout,
        stats,
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

mod receiver;
mod sender;

#[cfg(test)]
mod tests;
