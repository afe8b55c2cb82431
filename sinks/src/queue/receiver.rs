//! The sink side of a queue: taking batches (memory, then spool), retries after rejections,
//! and the shutdown deadline.

use std::time::{Duration, Instant};

use super::{QueueReceiver, State, BACKOFF_FIRST, BACKOFF_MAX};
use crate::sink::DropReason;
use crate::EventBatch;

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
        shared.stats.set_healthy(false);
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

    /// When the queue stops waiting for the sink: the shutdown timeout after the queue closed.
    /// Sinks that wait for acknowledgements (Kafka, OTLP) give up on what is still in flight
    /// then and reject it, so it is spooled. None while the agent runs.
    pub fn shutdown_deadline(&self) -> Option<Instant> {
        let shared = &*self.shared;
        shared
            .lock()
            .closed_at
            .map(|closed| crate::limits::instant_after(closed, shared.shutdown_timeout))
    }

    /// The sink delivered a batch: it is healthy again.
    pub fn delivered(&self) {
        let mut state = self.shared.lock();
        if !state.sink_healthy {
            tracing::info!(sink = %self.shared.name, "sink recovered");
        }
        state.sink_healthy = true;
        self.shared.stats.set_healthy(true);
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
