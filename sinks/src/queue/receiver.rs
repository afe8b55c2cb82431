//! The sink side of a queue: taking batches (memory, then spool, whose segments are read
//! without the lock so capture never waits on a replay's disk), retries after rejections,
//! settling the XID journal, stall detection, and the shutdown deadline.

use std::time::{Duration, Instant};

use super::{QueueReceiver, Queued, State};
use crate::spool::{FrontSegment, SpoolError};
use crate::stats::DropReason;
use crate::{EventBatch, Retention};

/// How often a waiting receiver re-checks deadlines and stalls.
const RECHECK: Duration = Duration::from_millis(200);

/// A spool segment read without the queue's lock, and what reading it gave.
struct ReadSegment {
    front: FrontSegment,
    result: Result<EventBatch, SpoolError>,
}

/// What one look at the queue (under its lock) gave.
enum Taken {
    /// A batch for the sink, and the spool file to delete once the lock is released.
    Batch(EventBatch, Option<std::path::PathBuf>),
    /// The spool's oldest segment, to read without the lock before the next look.
    Read(FrontSegment),
    /// Nothing to take now.
    Nothing,
}

/// What the receiver does after a look at the queue, with the lock released.
enum Step {
    Deliver(EventBatch, Option<std::path::PathBuf>),
    Read(FrontSegment),
    /// Waits until the given delay passes, or until a producer signals (None).
    Wait(Option<Duration>),
}

impl QueueReceiver {
    /// The next batch to deliver: XIDs first, then CUDA, then spooled batches oldest first.
    /// None once the queue is closed and empty, or closed for longer than the shutdown timeout
    /// (what is left then goes to the spool).
    pub async fn recv(&mut self) -> Option<EventBatch> {
        self.next(false).await
    }

    /// [`recv`](Self::recv) when `any` is true; otherwise the next XID batch only (the other
    /// kinds stay queued), for a sink that stopped taking batches because too many are
    /// unacknowledged, so XIDs still go out first. With `any` false it never returns None.
    pub async fn recv_or_xid(&mut self, any: bool) -> Option<EventBatch> {
        self.next(!any).await
    }

    async fn next(&mut self, xid_only: bool) -> Option<EventBatch> {
        let shared = &*self.shared;
        // The oldest spool segment as read without the lock on the previous turn.
        let mut read: Option<ReadSegment> = None;
        loop {
            let notified = shared.ready.notified();
            let step = {
                let mut state = shared.lock();
                let now = Instant::now();
                shared.check_stall(&mut state, now);
                shared.release_journal(&mut state);
                let deadline_passed = state.ends.past_deadline(now, shared.shutdown_timeout);
                if deadline_passed && !xid_only {
                    self.spool_the_rest(&mut state);
                    return None;
                }
                match state.health.retry_at() {
                    Some(at) if at > now => Step::Wait(Some(at - now)),
                    _ => match self.take(&mut state, xid_only, read.take()) {
                        Taken::Batch(batch, unlink) => Step::Deliver(batch, unlink),
                        Taken::Read(front) => Step::Read(front),
                        Taken::Nothing => {
                            if !xid_only
                                && state.ends.closed()
                                && state.memory.events() == 0
                                && !state.disk.backlog()
                            {
                                return None;
                            }
                            Step::Wait(None)
                        }
                    },
                }
            };
            match step {
                Step::Deliver(batch, unlink) => {
                    if let Some(path) = unlink {
                        let _ = std::fs::remove_file(path);
                    }
                    return Some(batch);
                }
                // Disk and decoding happen here, without the lock: the capture thread keeps
                // queueing (and spilling) meanwhile.
                Step::Read(front) => {
                    let result = front.read();
                    read = Some(ReadSegment { front, result });
                }
                Step::Wait(Some(delay)) => tokio::time::sleep(delay.min(RECHECK)).await,
                Step::Wait(None) => {
                    let _ = tokio::time::timeout(RECHECK, notified).await;
                }
            }
        }
    }

    /// The next batch under the lock: memory first, then the spool's oldest segment (`read`,
    /// when it is the segment read on the previous turn; otherwise the segment to read), then
    /// the spill lane.
    fn take(&self, state: &mut State, xid_only: bool, read: Option<ReadSegment>) -> Taken {
        let shared = &*self.shared;
        let queued = if xid_only {
            state.memory.pop_kept()
        } else {
            state.memory.pop()
        };
        if let Some(Queued { batch, journal, .. }) = queued {
            let now = Instant::now();
            state.handoff.hand(batch.kind, batch.len(), now);
            if let Some(seq) = journal {
                state.journal.handed(seq);
            }
            // Taking may end a stall (the sink was blocked and is back).
            shared.check_stall(state, now);
            shared.publish(state);
            shared.room.notify_all();
            return Taken::Batch(batch, None);
        }
        if xid_only {
            return Taken::Nothing;
        }
        let Some(spool) = state.disk.spool_mut() else {
            return Taken::Nothing;
        };
        let (batch, unlink) = match (spool.front(), read) {
            // The segment read last turn is still the oldest: it is taken now.
            (Some(front), Some(read)) if read.front == front => match read.result {
                Ok(batch) => {
                    let unlink = spool.take_front(&front);
                    shared.stats.replayed.add(batch.kind, batch.len() as u64);
                    (batch, unlink)
                }
                Err(err) => {
                    if let Some((kind, events)) = spool.quarantine_front(&front, &err) {
                        shared.stats.drop_corrupt_segment(kind, events);
                    }
                    return match spool.front() {
                        Some(next) => Taken::Read(next),
                        None => Taken::Nothing,
                    };
                }
            },
            // Not read yet, or the spool changed meanwhile (a drop made room): read it.
            (Some(front), _) => return Taken::Read(front),
            // The spool is empty: the spill lane's oldest batch, straight from memory, unless
            // an older one is being written (it comes back from the spool once committed).
            (None, _) if !state.disk.is_writing() => match state.disk.unspill() {
                Some(queued) => (queued.batch, None),
                None => return Taken::Nothing,
            },
            (None, _) => return Taken::Nothing,
        };
        state.handoff.hand(batch.kind, batch.len(), Instant::now());
        shared.publish(state);
        // Room in the spool or the lane for a producer waiting on a full one.
        shared.room.notify_all();
        Taken::Batch(batch, unlink)
    }

    pub(crate) fn spool_the_rest(&self, state: &mut State) {
        let shared = &*self.shared;
        let (mut spooled, mut dropped) = (0, 0);
        // Memory first (older than the lane), then the spill lane (the writer thread cannot
        // take from it meanwhile: this holds the lock).
        while let Some(queued) = state.memory.pop() {
            let Queued {
                batch,
                bytes,
                journal,
            } = queued;
            let events = batch.len() as u64;
            if state.disk.spool().is_none() {
                dropped += events;
                shared
                    .stats
                    .drop_events(DropReason::ShutdownTimeout, batch.kind, events);
            } else if shared.spool_store(state, batch, bytes) {
                spooled += events;
                // Now in the spool: the journal entry has done its job.
                if let Some(seq) = journal {
                    state.journal.remove(seq);
                }
            } else {
                // Counted by `spool_store` (spool full or failing); an XID keeps its journal
                // entry, so the next run still sends it.
                dropped += events;
            }
        }
        let (lane_spooled, lane_dropped) = shared.write_lane_now(state);
        spooled += lane_spooled;
        dropped += lane_dropped;
        shared.publish(state);
        if spooled + dropped > 0 {
            tracing::warn!(sink = %shared.name, spooled, dropped, "shutdown timeout: undelivered events left in the spool, the rest dropped (counted by reason)");
        }
    }

    /// The sink could not deliver `batch`: it is retried first, after a backoff that doubles
    /// (with jitter) while failures go on. During the backoff, batches that do not fit go to the spool.
    pub fn reject(&self, batch: EventBatch) {
        let shared = &*self.shared;
        let mut state = shared.lock();
        if state.health.delivering() {
            tracing::warn!(sink = %shared.name, "sink failing: retrying with backoff, spooling what does not fit in memory");
        }
        state.health.failed(Instant::now());
        shared.stats.set_healthy(false);
        let bytes = batch.records.get_array_memory_size();
        state.handoff.hand_back(batch.kind, batch.len());
        // A rejected batch was already counted as received; it only changes place.
        if state
            .ends
            .past_deadline(Instant::now(), shared.shutdown_timeout)
            && state.disk.spool().is_some()
        {
            // Past the deadline: straight to the spool, said as spool_the_rest says it.
            let events = batch.len();
            let (spooled, dropped) = if shared.spool_store(&mut state, batch, bytes) {
                (events, 0)
            } else {
                (0, events)
            };
            tracing::warn!(sink = %shared.name, spooled, dropped, "shutdown timeout: undelivered events left in the spool, the rest dropped (counted by reason)");
        } else {
            // XIDs handed back are journaled again: the entry they had is released with the
            // others the sink was handed.
            let journal = if batch.kind.retention() == Retention::Kept {
                shared.journal_store(&mut state, &batch)
            } else {
                None
            };
            state.memory.push(
                Queued {
                    batch,
                    bytes,
                    journal,
                },
                true,
            );
        }
        shared.release_journal(&mut state);
        shared.publish(&state);
        drop(state);
        shared.room.notify_all();
    }

    /// Tells the queue that the sink keeps XIDs up to `hold` before it can acknowledge them on
    /// purpose (Parquet's XID files close `xid_max_file_age_ms` after they open), so an XID
    /// unsettled for that long is not yet overdue. 0 by default: XIDs are acknowledged as soon
    /// as the destination answers.
    pub fn holds_xids_for(&self, hold: std::time::Duration) {
        self.shared.lock().handoff.hold_xids_for(hold);
    }

    /// When the queue stops waiting for the sink: the shutdown timeout after the queue closed.
    /// Sinks that wait for acknowledgements (Kafka, OTLP) give up on what is still in flight
    /// then and reject it, so it is spooled. None while the agent runs.
    pub fn shutdown_deadline(&self) -> Option<Instant> {
        let shared = &*self.shared;
        shared
            .lock()
            .ends
            .closed_at()
            .map(|closed| crate::limits::instant_after(closed, shared.shutdown_timeout))
    }

    /// The sink delivered a batch (after counting it in its stats): it is healthy again, and
    /// XIDs it has settled leave the journal.
    pub fn delivered(&self) {
        let shared = &*self.shared;
        let mut state = shared.lock();
        if state.health.recovered() {
            tracing::info!(sink = %shared.name, "sink recovered");
        }
        state.handoff.progress(Instant::now());
        shared.stats.set_healthy(true);
        shared.release_journal(&mut state);
        drop(state);
        // A producer may be waiting for a decision that depended on the stall.
        shared.room.notify_all();
    }
}

impl Drop for QueueReceiver {
    fn drop(&mut self) {
        let shared = &*self.shared;
        // No more batches come in; those bound for the spool reach it (the next run sends
        // them): the writer's current one, then the rest of the lane on this thread.
        let mut state = shared.lock();
        state.ends.receiver_gone();
        let mut state = shared.wait_for_writer(state);
        shared.write_lane_now(&mut state);
        // Journaled XIDs stay journaled: the next run delivers them.
        while let Some(queued) = state.memory.pop() {
            shared.stats.drop_events(
                DropReason::SinkStopped,
                queued.batch.kind,
                queued.batch.len() as u64,
            );
        }
        shared.publish(&state);
        drop(state);
        shared.room.notify_all();
        // The writer thread ends.
        shared.spill_ready.notify_all();
    }
}
