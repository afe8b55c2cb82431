//! The bounded queue in front of every sink, with its `when_full` policy.
//!
//! Producers are plain threads and send with [`QueueSender::send_blocking`]; the sink receives
//! with the async [`QueueReceiver::recv`]. XID batches have their own lane: they are taken
//! first, never dropped by policy, and admitted even when the queue is full (they are tiny and
//! rare). CUDA batches obey `when_full`:
//!
//! - `block`: the producer waits for room; the pipeline slows and any loss happens, counted,
//!   in the kernel ring;
//! - `drop_newest`: the incoming batch is dropped and counted (`buffer_full`);
//! - `drop_oldest`: the oldest queued CUDA batches are dropped and counted to make room.
//!
//! Every event offered to the sink is counted as received here, so for each sink
//! `received = delivered + dropped + failed + in_flight` (queued and unacknowledged).

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use serde::Deserialize;
use tokio::sync::Notify;

use crate::sink::{DropReason, SinkStats};
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
    /// Events queued at most.
    #[serde(default = "default_max_events")]
    pub max_events: usize,
    /// Bytes (Arrow memory) queued at most.
    #[serde(default = "default_max_bytes")]
    pub max_bytes: usize,
    /// Policy when full.
    #[serde(default)]
    pub when_full: WhenFull,
}

fn default_max_events() -> usize {
    1 << 20
}

fn default_max_bytes() -> usize {
    256 << 20
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

#[derive(Debug, Default)]
struct State {
    xid: VecDeque<(EventBatch, usize)>,
    cuda: VecDeque<(EventBatch, usize)>,
    events: usize,
    bytes: usize,
    senders: usize,
    receiver_alive: bool,
}

impl State {
    fn push(&mut self, lane: EventKind, batch: EventBatch, bytes: usize) {
        self.events += batch.len();
        self.bytes += bytes;
        match lane {
            EventKind::Xid => self.xid.push_back((batch, bytes)),
            EventKind::Cuda => self.cuda.push_back((batch, bytes)),
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
}

#[derive(Debug)]
struct Shared {
    state: Mutex<State>,
    room: Condvar,
    ready: Notify,
    config: BufferConfig,
    stats: Arc<SinkStats>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves consistent counters; keep going.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn publish_depth(&self, state: &State) {
        self.stats
            .queued_events
            .store(state.events as u64, std::sync::atomic::Ordering::Relaxed);
        self.stats
            .queued_bytes
            .store(state.bytes as u64, std::sync::atomic::Ordering::Relaxed);
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

/// A queue for one sink, counting into `stats`.
pub fn queue(config: BufferConfig, stats: Arc<SinkStats>) -> (QueueSender, QueueReceiver) {
    let shared = Arc::new(Shared {
        state: Mutex::new(State {
            senders: 1,
            receiver_alive: true,
            ..State::default()
        }),
        room: Condvar::new(),
        ready: Notify::new(),
        config,
        stats,
    });
    (
        QueueSender {
            shared: shared.clone(),
        },
        QueueReceiver { shared },
    )
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
        if kind == EventKind::Cuda {
            match shared.config.when_full {
                WhenFull::Block => {
                    while state.receiver_alive && !state.has_room(&shared.config, events, bytes) {
                        state = shared.room.wait(state).unwrap_or_else(|p| p.into_inner());
                    }
                }
                WhenFull::DropNewest => {
                    if !state.has_room(&shared.config, events, bytes) {
                        shared
                            .stats
                            .drop_events(DropReason::BufferFull, kind, events as u64);
                        return;
                    }
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
                }
            }
        }
        if !state.receiver_alive {
            shared
                .stats
                .drop_events(DropReason::SinkStopped, kind, events as u64);
            return;
        }
        state.push(kind, batch, bytes);
        shared.publish_depth(&state);
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
        let closed = state.senders == 0;
        drop(state);
        if closed {
            self.shared.ready.notify_one();
        }
    }
}

impl QueueReceiver {
    /// The next batch (XIDs first), or None once every sender is gone and the queue is empty.
    pub async fn recv(&mut self) -> Option<EventBatch> {
        loop {
            let notified = self.shared.ready.notified();
            {
                let mut state = self.shared.lock();
                if let Some(batch) = state.pop() {
                    self.shared.publish_depth(&state);
                    drop(state);
                    self.shared.room.notify_all();
                    return Some(batch);
                }
                if state.senders == 0 {
                    return None;
                }
            }
            notified.await;
        }
    }
}

impl Drop for QueueReceiver {
    fn drop(&mut self) {
        let mut state = self.shared.lock();
        state.receiver_alive = false;
        while let Some(batch) = state.pop() {
            self.shared
                .stats
                .drop_events(DropReason::SinkStopped, batch.kind, batch.len() as u64);
        }
        self.shared.publish_depth(&state);
        drop(state);
        self.shared.room.notify_all();
    }
}

#[cfg(test)]
#[path = "queue_tests.rs"]
mod tests;
