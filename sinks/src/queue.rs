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
    1 << 18
}

fn default_max_bytes() -> usize {
    32 << 20
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

/// Retry delays after a failed delivery: doubling from the first to the last.
const BACKOFF_FIRST: Duration = Duration::from_millis(500);
const BACKOFF_MAX: Duration = Duration::from_secs(30);

#[derive(Debug)]
struct State {
    xid: VecDeque<(EventBatch, usize)>,
    cuda: VecDeque<(EventBatch, usize)>,
    events: usize,
    bytes: usize,
    senders: usize,
    receiver_alive: bool,
    spool: Option<Spool>,
    /// False from a rejected batch until the next delivered one.
    sink_healthy: bool,
    backoff: Duration,
    retry_at: Option<Instant>,
    closed_at: Option<Instant>,
}

impl State {
    fn push(&mut self, batch: EventBatch, bytes: usize, front: bool) {
        self.events += batch.len();
        self.bytes += bytes;
        let lane = match batch.kind {
            EventKind::Xid => &mut self.xid,
            EventKind::Cuda => &mut self.cuda,
        };
        if front {
            lane.push_front((batch, bytes));
        } else {
            lane.push_back((batch, bytes));
        }
    }

    fn pop(&mut self) -> Option<EventBatch> {
        let (batch, bytes) = self.xid.pop_front().or_else(|| self.cuda.pop_front())?;
        self.events -= batch.len();
        self.bytes -= bytes;
        Some(batch)
    }

    fn has_room(&self, config: &BufferConfig, events: usize, bytes: usize) -> bool {
        // An oversized batch is still admitted into an empty queue, or nothing could pass.
        self.events == 0
            || (self.events + events <= config.max_events && self.bytes + bytes <= config.max_bytes)
    }

    fn spool_backlog(&self) -> bool {
        self.spool.as_ref().is_some_and(|s| !s.is_empty())
    }
}

#[derive(Debug)]
struct Shared {
    name: String,
    state: Mutex<State>,
    room: Condvar,
    ready: Notify,
    config: BufferConfig,
    shutdown_timeout: Duration,
    stats: Arc<SinkStats>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves consistent counters; keep going.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn publish(&self, state: &State) {
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
    fn spool_store(&self, state: &mut State, batch: EventBatch, bytes: usize) {
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
    shared: Arc<Shared>,
}

/// The sink side.
#[derive(Debug)]
pub struct QueueReceiver {
    shared: Arc<Shared>,
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

impl QueueSender {
    /// Offers `batch` to the sink under the queue's policy. Must not be called from async code.
    pub fn send_blocking(&self, batch: EventBatch) {
        if batch.is_empty() {
            return;
        }
        let shared = &*self.shared;
        let (kind, events, bytes) = (
            batch.kind,
            batch.len(),
            batch.records.get_array_memory_size(),
        );
        shared.stats.received.add(kind, events as u64);
        let mut state = shared.lock();
        loop {
            if !state.receiver_alive {
                shared
                    .stats
                    .drop_events(DropReason::SinkStopped, kind, events as u64);
                return;
            }
            let spooling = state.spool.is_some();
            // Behind a spool backlog, or while the sink fails and memory is full: to disk.
            if spooling
                && (state.spool_backlog()
                    || (!state.sink_healthy && !state.has_room(&shared.config, events, bytes)))
            {
                shared.spool_store(&mut state, batch, bytes);
                shared.publish(&state);
                drop(state);
                shared.ready.notify_one();
                return;
            }
            if kind == EventKind::Xid || state.has_room(&shared.config, events, bytes) {
                break;
            }
            match shared.config.when_full {
                WhenFull::Block => {
                    // Woken by a receive, a rejection (the sink may now be failing), or its end.
                    state = shared.room.wait(state).unwrap_or_else(|p| p.into_inner());
                }
                WhenFull::DropNewest => {
                    shared
                        .stats
                        .drop_events(DropReason::BufferFull, kind, events as u64);
                    return;
                }
                WhenFull::DropOldest => {
                    while !state.has_room(&shared.config, events, bytes) {
                        let Some((old, old_bytes)) = state.cuda.pop_front() else {
                            break;
                        };
                        state.events -= old.len();
                        state.bytes -= old_bytes;
                        shared.stats.drop_events(
                            DropReason::BufferFull,
                            old.kind,
                            old.len() as u64,
                        );
                    }
                    break;
                }
            }
        }
        state.push(batch, bytes, false);
        shared.publish(&state);
        drop(state);
        shared.ready.notify_one();
    }
}

impl Clone for QueueSender {
    fn clone(&self) -> Self {
        self.shared.lock().senders += 1;
        Self {
            shared: self.shared.clone(),
        }
    }
}

impl Drop for QueueSender {
    fn drop(&mut self) {
        let mut state = self.shared.lock();
        state.senders -= 1;
        if state.senders == 0 {
            state.closed_at = Some(Instant::now());
        }
        drop(state);
        self.shared.ready.notify_one();
    }
}

impl QueueReceiver {
    /// The next batch to deliver: XIDs first, then CUDA, then spooled batches oldest first.
    /// None once the queue is closed and empty, or closed for longer than the shutdown timeout
    /// (what is left then goes to the spool).
    pub async fn recv(&mut self) -> Option<EventBatch> {
        let shared = &*self.shared;
        loop {
            let notified = shared.ready.notified();
            let wait = {
                let mut state = shared.lock();
                let now = Instant::now();
                let deadline_passed = state
                    .closed_at
                    .is_some_and(|t| now.duration_since(t) >= shared.shutdown_timeout);
                if deadline_passed {
                    self.spool_the_rest(&mut state);
                    return None;
                }
                match state.retry_at {
                    Some(at) if at > now => Some(at - now),
                    _ => {
                        if let Some(batch) = self.take(&mut state) {
                            return Some(batch);
                        }
                        if state.senders == 0 && state.events == 0 && !state.spool_backlog() {
                            return None;
                        }
                        None
                    }
                }
            };
            match wait {
                Some(delay) => {
                    let closing = shared.lock().closed_at.is_some();
                    let delay = if closing {
                        delay.min(Duration::from_millis(100))
                    } else {
                        delay
                    };
                    tokio::time::sleep(delay).await;
                }
                None => {
                    // A closed queue is re-checked now and then for the shutdown deadline.
                    let _ = tokio::time::timeout(Duration::from_millis(200), notified).await;
                }
            }
        }
    }

    fn take(&self, state: &mut State) -> Option<EventBatch> {
        let shared = &*self.shared;
        if let Some(batch) = state.pop() {
            shared.publish(state);
            shared.room.notify_all();
            return Some(batch);
        }
        let spool = state.spool.as_mut()?;
        let (batch, corrupt) = spool.peek();
        for (kind, events) in corrupt {
            shared
                .stats
                .drop_events(DropReason::SpoolCorrupt, kind, events);
        }
        let batch = batch?;
        spool.pop();
        shared.stats.replayed.add(batch.kind, batch.len() as u64);
        shared.publish(state);
        Some(batch)
    }

    fn spool_the_rest(&self, state: &mut State) {
        let shared = &*self.shared;
        let mut spooled = 0;
        while let Some((batch, bytes)) = state.xid.pop_front().or_else(|| state.cuda.pop_front()) {
            state.events -= batch.len();
            state.bytes -= bytes;
            spooled += batch.len();
            if state.spool.is_some() {
                shared.spool_store(state, batch, bytes);
            } else {
                shared.stats.drop_events(
                    DropReason::ShutdownTimeout,
                    batch.kind,
                    batch.len() as u64,
                );
            }
        }
        shared.publish(state);
        if spooled > 0 {
            tracing::warn!(sink = %shared.name, events = spooled, spool = state.spool.is_some(), "shutdown timeout: undelivered events left in the spool");
        }
    }

    /// The sink could not deliver `batch`: it is retried first, after a backoff that doubles
    /// while failures go on. During the backoff, batches that do not fit go to the spool.
    pub fn reject(&self, batch: EventBatch) {
        let shared = &*self.shared;
        let mut state = shared.lock();
        if state.sink_healthy {
            tracing::warn!(sink = %shared.name, "sink failing: retrying with backoff, spooling what does not fit in memory");
        }
        state.sink_healthy = false;
        state.retry_at = Some(Instant::now() + state.backoff);
        state.backoff = (state.backoff * 2).min(BACKOFF_MAX);
        let bytes = batch.records.get_array_memory_size();
        // A rejected batch was already counted as received; it only changes place.
        if state
            .closed_at
            .is_some_and(|t| t.elapsed() >= shared.shutdown_timeout)
            && state.spool.is_some()
        {
            shared.spool_store(&mut state, batch, bytes);
        } else {
            state.push(batch, bytes, true);
        }
        shared.publish(&state);
        drop(state);
        shared.room.notify_all();
    }

    /// The sink delivered a batch: it is healthy again.
    pub fn delivered(&self) {
        let mut state = self.shared.lock();
        if !state.sink_healthy {
            tracing::info!(sink = %self.shared.name, "sink recovered");
        }
        state.sink_healthy = true;
        state.backoff = BACKOFF_FIRST;
        state.retry_at = None;
    }
}

impl Drop for QueueReceiver {
    fn drop(&mut self) {
        let shared = &*self.shared;
        let mut state = shared.lock();
        state.receiver_alive = false;
        while let Some(batch) = state.pop() {
            shared
                .stats
                .drop_events(DropReason::SinkStopped, batch.kind, batch.len() as u64);
        }
        shared.publish(&state);
        drop(state);
        shared.room.notify_all();
    }
}

#[cfg(test)]
#[path = "queue_tests.rs"]
mod tests;
