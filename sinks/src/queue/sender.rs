//! The producer side of a sink queue: admission under the `when_full` policy, the XID lane
//! and its journal, and overflow to the spool when memory is full.

use std::time::Instant;

use super::{QueueSender, Queued, Shared, State, WhenFull};
use crate::stats::DropReason;
use crate::{EventBatch, EventKind, Retention};

/// What to do with a batch that arrived.
enum Admission {
    /// Into memory.
    Memory,
    /// To the spool (done; nothing left to do).
    Spooled,
    /// Dropped by the policy (counted).
    Dropped,
    /// Wait for room, then decide again.
    Wait,
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
        if !state.ends.receiver_alive() {
            shared
                .stats
                .drop_events(DropReason::SinkStopped, kind, events as u64);
            return;
        }
        // Kinds that are kept (XIDs): written ahead, then always in memory, ahead of
        // everything else.
        let journal = if kind.retention() == Retention::Kept {
            shared.journal_store(&mut state, &batch)
        } else {
            None
        };
        let mut batch = Some(batch);
        loop {
            if !state.ends.receiver_alive() {
                shared
                    .stats
                    .drop_events(DropReason::SinkStopped, kind, events as u64);
                return;
            }
            let admission = if journal.is_some() {
                Admission::Memory
            } else {
                admit(shared, &mut state, kind, events, bytes)
            };
            match admission {
                Admission::Memory => break,
                Admission::Wait => {
                    // Woken by a receive, a rejection, a delivery, or the sink's end.
                    state = shared.room.wait(state).unwrap_or_else(|p| p.into_inner());
                }
                Admission::Dropped => return,
                Admission::Spooled => {
                    if let Some(batch) = batch.take() {
                        if state.health.stalled() {
                            shared.stats.count_error("stalled", batch.len() as u64);
                        }
                        if state.disk.has_writer_thread() {
                            // The writer thread writes it: this thread never waits for the disk.
                            state.disk.spill(Queued {
                                batch,
                                bytes,
                                journal: None,
                            });
                            shared.spill_ready.notify_one();
                        } else {
                            shared.spool_store(&mut state, batch, bytes);
                        }
                    }
                    shared.publish(&state);
                    drop(state);
                    shared.ready.notify_one();
                    return;
                }
            }
        }
        if let Some(batch) = batch {
            state.memory.push(
                Queued {
                    batch,
                    bytes,
                    journal,
                },
                false,
            );
        }
        shared.publish(&state);
        drop(state);
        shared.ready.notify_one();
    }
}

/// Decides where a batch goes. With a spool, a batch that does not fit in memory (or arrives
/// behind a spool backlog) is spilled; capture only waits or drops when memory and spool are
/// both full, or when there is no spool.
fn admit(
    shared: &Shared,
    state: &mut State,
    kind: EventKind,
    events: usize,
    bytes: usize,
) -> Admission {
    let fits = state.memory.has_room(&shared.config, events, bytes);
    shared.check_stall(state, Instant::now());
    let backlog = state.disk.backlog();
    if let Some(spool) = state.disk.spool() {
        if backlog || (!fits && kind.droppable()) {
            // A full spool under `block` waits for the replay to make room, keeping order;
            // the drop policies drop there (counted as `spool_full` when it is written).
            let spool_full = !spool.has_room((state.disk.lane_bytes() + bytes) as u64);
            if spool_full && kind.droppable() && shared.config.when_full == WhenFull::Block {
                return Admission::Wait;
            }
            if kind.droppable()
                && state.disk.has_writer_thread()
                && !state.disk.lane_has_room(bytes)
            {
                return when_full(shared, state, kind, events, bytes, Full::SpillLane);
            }
            return Admission::Spooled;
        }
    }
    if !kind.droppable() || fits {
        return Admission::Memory;
    }
    when_full(shared, state, kind, events, bytes, Full::Memory)
}

/// Where a batch that found no room was going.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Full {
    /// The memory queue.
    Memory,
    /// The spill lane in front of the spool (the disk is slower than the load).
    SpillLane,
}

/// The `when_full` policy for a batch that finds `full` without room: `block` waits,
/// `drop_newest` drops it, `drop_oldest` drops the oldest droppable batches there until it
/// fits (all counted as `buffer_full`).
fn when_full(
    shared: &Shared,
    state: &mut State,
    kind: EventKind,
    events: usize,
    bytes: usize,
    full: Full,
) -> Admission {
    match shared.config.when_full {
        WhenFull::Block => Admission::Wait,
        WhenFull::DropNewest => {
            shared
                .stats
                .drop_events(DropReason::BufferFull, kind, events as u64);
            Admission::Dropped
        }
        WhenFull::DropOldest => {
            loop {
                let room = match full {
                    Full::Memory => state.memory.has_room(&shared.config, events, bytes),
                    Full::SpillLane => state.disk.lane_has_room(bytes),
                };
                if room {
                    break;
                }
                let evicted = match full {
                    Full::Memory => state.memory.pop_oldest_droppable(),
                    Full::SpillLane => state.disk.unspill_oldest_droppable(),
                };
                let Some(old) = evicted else {
                    break;
                };
                shared.stats.drop_events(
                    DropReason::BufferFull,
                    old.batch.kind,
                    old.batch.len() as u64,
                );
            }
            match full {
                Full::Memory => Admission::Memory,
                Full::SpillLane => Admission::Spooled,
            }
        }
    }
}

impl Clone for QueueSender {
    fn clone(&self) -> Self {
        self.shared.lock().ends.add_sender();
        Self {
            shared: self.shared.clone(),
        }
    }
}

impl Drop for QueueSender {
    fn drop(&mut self) {
        let mut state = self.shared.lock();
        state.ends.drop_sender(Instant::now());
        drop(state);
        self.shared.ready.notify_one();
    }
}
