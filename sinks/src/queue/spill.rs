//! Writing a queue's spool: the spill lane and its writer thread, and the synchronous writes
//! of the shutdown paths.
//!
//! A batch the queue decides to spool goes into the *spill lane* (memory, bounded by the
//! spool's `write_buffer`) and one thread per spool writes it to disk, so the producer (the
//! capture thread) never waits for the disk, and the queue's lock is not held during a write.
//! A slow or stalled disk fills the lane; only a full lane makes the producer wait (`block`)
//! or drop (`buffer_full`), as a full memory queue does.
//!
//! Order is kept: the lane holds the newest batches bound for the spool, the spool the older
//! ones, and the receiver takes spooled segments first, then (once the spool is empty and no
//! write is in flight) the lane's oldest batch straight from memory.

use std::sync::Arc;

use super::{Queued, Shared, State, WhenFull};
use crate::stats::DropReason;
use crate::{EventBatch, EventKind};

/// Whether a batch may be written to the spool now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Room {
    /// It fits (or is an XID, which is always kept).
    Fits,
    /// The spool is full and the policy is `block`: wait for the replay to make room.
    Wait,
    /// The spool is full under a drop policy: counted as `spool_full`.
    Dropped,
}

impl Shared {
    /// Makes room in the spool for a batch of `bytes` under the policy (`drop_oldest` drops
    /// old droppable segments). A droppable batch that still does not fit waits under `block`
    /// when `may_wait` (the writer thread), else is dropped and counted as `spool_full`. XIDs
    /// always fit.
    fn spool_room(
        &self,
        state: &mut State,
        kind: EventKind,
        events: u64,
        bytes: usize,
        may_wait: bool,
    ) -> Room {
        let Some(spool) = state.disk.spool_mut() else {
            return Room::Dropped;
        };
        if !kind.droppable() || spool.has_room(bytes as u64) {
            return Room::Fits;
        }
        if self.config.when_full == WhenFull::DropOldest {
            while !spool.has_room(bytes as u64) {
                let Some((dropped_kind, dropped)) = spool.drop_oldest_droppable() else {
                    break;
                };
                self.stats
                    .drop_events(DropReason::SpoolFull, dropped_kind, dropped);
            }
        }
        if spool.has_room(bytes as u64) {
            return Room::Fits;
        }
        if may_wait && self.config.when_full == WhenFull::Block {
            return Room::Wait;
        }
        self.stats.drop_events(DropReason::SpoolFull, kind, events);
        Room::Dropped
    }

    /// Writes `batch` to the spool now, on this thread (the shutdown paths), applying the
    /// policy when the spool is full: droppable batches (CUDA, driver) are dropped
    /// (`drop_oldest` drops old droppable segments instead), XIDs are always kept.
    /// True when the batch is on disk.
    pub(crate) fn spool_store(&self, state: &mut State, batch: EventBatch, bytes: usize) -> bool {
        let kind = batch.kind;
        let events = batch.len() as u64;
        if state.disk.spool().is_none() {
            self.stats
                .drop_events(DropReason::SinkStopped, kind, events);
            return false;
        }
        if self.spool_room(state, kind, events, bytes, false) != Room::Fits {
            return false;
        }
        let Some(spool) = state.disk.spool_mut() else {
            return false;
        };
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

    /// Waits until the writer thread has no write in flight (the shutdown paths then write
    /// the rest themselves).
    pub(crate) fn wait_for_writer<'a>(
        &'a self,
        mut state: std::sync::MutexGuard<'a, State>,
    ) -> std::sync::MutexGuard<'a, State> {
        while state.disk.is_writing() {
            state = self.room.wait(state).unwrap_or_else(|p| p.into_inner());
        }
        state
    }

    /// Writes what is left in the lane, on this thread; returns (spooled, dropped) events.
    pub(crate) fn write_lane_now(&self, state: &mut State) -> (u64, u64) {
        let (mut spooled, mut dropped) = (0, 0);
        while let Some(Queued { batch, bytes, .. }) = state.disk.unspill() {
            let events = batch.len() as u64;
            if self.spool_store(state, batch, bytes) {
                spooled += events;
            } else {
                dropped += events;
            }
        }
        (spooled, dropped)
    }
}

/// How long the writer waits for room in a full spool under `block` before looking again.
const FULL_SPOOL_RECHECK: std::time::Duration = std::time::Duration::from_millis(200);

/// The spool's writer thread: writes the lane's batches oldest first until the receiver is
/// gone and the lane is empty. Under `block`, a batch that does not fit in a full spool waits
/// at the head of the lane until the replay makes room (the lane then fills and the producer
/// waits, as `block` says); the drop policies drop it (`spool_full`).
pub(crate) fn write_spilled(shared: Arc<Shared>) {
    let mut state = shared.lock();
    loop {
        let Some(queued) = state.disk.unspill() else {
            if !state.ends.receiver_alive() {
                return;
            }
            state = shared
                .spill_ready
                .wait(state)
                .unwrap_or_else(|p| p.into_inner());
            continue;
        };
        let (kind, events, bytes) = (queued.batch.kind, queued.batch.len() as u64, queued.bytes);
        let may_wait = state.ends.receiver_alive();
        let queued = match shared.spool_room(&mut state, kind, events, bytes, may_wait) {
            Room::Fits => queued,
            Room::Wait => {
                state.disk.respill_front(queued);
                // An XID further back (in the lane because its journal write failed) does not
                // wait in memory for the replay: XIDs always fit, so it is written now.
                match state.disk.unspill_first_kept() {
                    Some(xid) => xid,
                    None => {
                        shared.publish(&state);
                        state = shared
                            .room
                            .wait_timeout(state, FULL_SPOOL_RECHECK)
                            .unwrap_or_else(|p| p.into_inner())
                            .0;
                        continue;
                    }
                }
            }
            Room::Dropped => {
                shared.publish(&state);
                shared.room.notify_all();
                continue;
            }
        };
        let (kind, events) = (queued.batch.kind, queued.batch.len() as u64);
        let Some(segment) = state.disk.spool_mut().map(|spool| spool.reserve()) else {
            continue;
        };
        state.disk.start_writing(kind, events);
        drop(state);
        #[cfg(test)]
        let _gate = shared.writer_gate.lock();
        // A panic while encoding or writing fails this batch, not the queue: `writing` is
        // always cleared, or the receiver and the producers would wait for it for ever.
        let written = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            segment.write(&queued.batch)
        }))
        .unwrap_or_else(|_| {
            Err(crate::spool::corrupt(
                std::path::Path::new("spool"),
                "the writer panicked while writing this batch",
            ))
        });
        drop(queued);
        #[cfg(test)]
        drop(_gate);
        state = shared.lock();
        state.disk.finish_writing();
        match written {
            Ok(written) => {
                if let Some(spool) = state.disk.spool_mut() {
                    spool.commit(written);
                }
                shared.stats.spooled.add(kind, events);
            }
            Err(err) => {
                shared.warn_limited(&shared.spool_warning, "cannot spool; events dropped", &err);
                shared
                    .stats
                    .drop_events(DropReason::SpoolFailed, kind, events);
            }
        }
        shared.publish(&state);
        // Room in the lane for a waiting producer; a segment (or the end of a write) for a
        // waiting receiver.
        shared.room.notify_all();
        shared.ready.notify_one();
    }
}

#[cfg(test)]
impl super::QueueSender {
    /// Waits until every batch bound for the spool is written (or dropped), for tests that
    /// look at the spool right after sending.
    pub(crate) fn wait_until_written(&self) {
        let shared = &*self.shared;
        let mut state = shared.lock();
        while !state.disk.lane_is_empty() || state.disk.is_writing() {
            state = shared
                .room
                .wait_timeout(state, std::time::Duration::from_millis(10))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
}
