//! The producer side of a sink queue: admission under the `when_full` policy, the XID lane,
//! and overflow to the spool while the sink fails.

use std::time::Instant;

use super::{QueueSender, WhenFull};
use crate::sink::DropReason;
use crate::{EventBatch, EventKind};

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
