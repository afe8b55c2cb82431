//! Batches waiting in memory: the lane of kept kinds (XIDs), taken first and never dropped by
//! policy, ahead of the lane of droppable kinds (CUDA, driver), with their event and byte counts.

use std::collections::VecDeque;
use std::time::Instant;

use enum_map::EnumMap;

use crate::queue::{BufferConfig, Queued};
use crate::{EventKind, Retention};

#[derive(Debug, Default)]
pub(crate) struct MemoryLanes {
    kept: VecDeque<Queued>,
    droppable: VecDeque<Queued>,
    events: usize,
    /// `events` by kind (kept as batches come and go, so publishing is not a scan).
    events_by_kind: EnumMap<EventKind, u64>,
    bytes: usize,
    /// Since when work waits here (None while empty), for stall detection.
    waiting_since: Option<Instant>,
}

impl MemoryLanes {
    /// Queues a batch in its kind's lane, at the back, or at the front (a batch handed back).
    pub(crate) fn push(&mut self, queued: Queued, front: bool) {
        if self.events == 0 {
            self.waiting_since = Some(Instant::now());
        }
        self.events += queued.batch.len();
        self.events_by_kind[queued.batch.kind] += queued.batch.len() as u64;
        self.bytes += queued.bytes;
        let lane = match queued.batch.kind.retention() {
            Retention::Kept => &mut self.kept,
            Retention::Droppable => &mut self.droppable,
        };
        if front {
            lane.push_front(queued);
        } else {
            lane.push_back(queued);
        }
    }

    /// Takes the next batch: the oldest kept one, else the oldest droppable one.
    pub(crate) fn pop(&mut self) -> Option<Queued> {
        let queued = self
            .kept
            .pop_front()
            .or_else(|| self.droppable.pop_front())?;
        self.forget(&queued);
        Some(queued)
    }

    /// Takes the oldest batch of a kept kind only.
    pub(crate) fn pop_kept(&mut self) -> Option<Queued> {
        let queued = self.kept.pop_front()?;
        self.forget(&queued);
        Some(queued)
    }

    /// Takes the oldest batch of a droppable kind only (dropped by `drop_oldest`).
    pub(crate) fn pop_oldest_droppable(&mut self) -> Option<Queued> {
        let queued = self.droppable.pop_front()?;
        self.forget(&queued);
        Some(queued)
    }

    /// Uncounts a batch that left memory.
    fn forget(&mut self, queued: &Queued) {
        self.events -= queued.batch.len();
        self.events_by_kind[queued.batch.kind] -= queued.batch.len() as u64;
        self.bytes -= queued.bytes;
        if self.events == 0 {
            self.waiting_since = None;
        }
    }

    /// Whether `events` more events of `bytes` fit under `config`'s bounds.
    pub(crate) fn has_room(&self, config: &BufferConfig, events: usize, bytes: usize) -> bool {
        // An oversized batch is still admitted into an empty queue, or nothing could pass.
        self.events == 0
            || (self.events + events <= config.max_events && self.bytes + bytes <= config.max_bytes)
    }

    /// Events waiting, of every kind.
    pub(crate) fn events(&self) -> usize {
        self.events
    }

    /// Events of `kind` waiting.
    pub(crate) fn events_of(&self, kind: EventKind) -> u64 {
        self.events_by_kind[kind]
    }

    /// Arrow memory of the batches waiting.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// Since when work waits in memory; None while it is empty.
    pub(crate) fn waiting_since(&self) -> Option<Instant> {
        self.waiting_since
    }
}
