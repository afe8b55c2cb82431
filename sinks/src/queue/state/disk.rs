//! The sink's spool and the spill lane in front of it: batches bound for the spool wait in the
//! lane (memory, bounded by the spool's `write_buffer`) until the spool's writer thread takes
//! one (`writing`) and commits it to disk (see `queue/spill.rs`).

use std::collections::VecDeque;

use enum_map::EnumMap;

use crate::queue::Queued;
use crate::spool::Spool;
use crate::EventKind;

/// A batch taken from the lane by the writer, until its segment is committed.
#[derive(Debug, Clone, Copy)]
struct Writing {
    kind: EventKind,
    events: u64,
}

#[derive(Debug)]
pub(crate) struct Disk {
    spool: Option<Spool>,
    /// Batches bound for the spool that its writer thread has not taken yet.
    lane: VecDeque<Queued>,
    lane_bytes: usize,
    lane_by_kind: EnumMap<EventKind, u64>,
    /// The batch the writer thread is writing now.
    writing: Option<Writing>,
    /// False when the writer thread could not start: the producer then writes the spool.
    writer_thread: bool,
}

impl Disk {
    pub(crate) fn new(spool: Option<Spool>) -> Self {
        Self {
            spool,
            lane: VecDeque::new(),
            lane_bytes: 0,
            lane_by_kind: EnumMap::default(),
            writing: None,
            writer_thread: true,
        }
    }

    /// The spool, when the sink has one.
    pub(crate) fn spool(&self) -> Option<&Spool> {
        self.spool.as_ref()
    }

    pub(crate) fn spool_mut(&mut self) -> Option<&mut Spool> {
        self.spool.as_mut()
    }

    /// Whether anything is spooled or on its way to the spool (order: new batches go behind).
    pub(crate) fn backlog(&self) -> bool {
        self.spool.as_ref().is_some_and(|s| !s.is_empty())
            || !self.lane.is_empty()
            || self.writing.is_some()
    }

    /// Whether a spool writer thread runs (false: the producer writes the spool itself).
    pub(crate) fn has_writer_thread(&self) -> bool {
        self.writer_thread
    }

    /// The writer thread could not start.
    pub(crate) fn without_writer_thread(&mut self) {
        self.writer_thread = false;
    }

    /// Whether the writer thread has a batch in flight.
    pub(crate) fn is_writing(&self) -> bool {
        self.writing.is_some()
    }

    /// The writer thread took a batch of `events` events of `kind` to write.
    pub(crate) fn start_writing(&mut self, kind: EventKind, events: u64) {
        self.writing = Some(Writing { kind, events });
    }

    /// The writer thread's batch is written (or failed).
    pub(crate) fn finish_writing(&mut self) {
        self.writing = None;
    }

    /// Puts a batch in the spill lane (the writer thread writes it).
    pub(crate) fn spill(&mut self, queued: Queued) {
        self.count(&queued);
        self.lane.push_back(queued);
    }

    /// Takes the lane's oldest batch.
    pub(crate) fn unspill(&mut self) -> Option<Queued> {
        let queued = self.lane.pop_front()?;
        self.uncount(&queued);
        Some(queued)
    }

    /// Takes the lane's oldest batch of a droppable kind (`drop_oldest` on a full lane: an
    /// XID in the lane, there because its journal write failed, is never dropped by policy).
    pub(crate) fn unspill_oldest_droppable(&mut self) -> Option<Queued> {
        self.unspill_first(|kind| kind.droppable())
    }

    /// Takes the lane's oldest batch of a kept kind (an XID), wherever it is.
    pub(crate) fn unspill_first_kept(&mut self) -> Option<Queued> {
        self.unspill_first(|kind| !kind.droppable())
    }

    fn unspill_first(&mut self, wanted: impl Fn(EventKind) -> bool) -> Option<Queued> {
        let index = self.lane.iter().position(|q| wanted(q.batch.kind))?;
        let queued = self.lane.remove(index)?;
        self.uncount(&queued);
        Some(queued)
    }

    /// Puts back a batch the writer took but must not write yet, as the lane's oldest.
    pub(crate) fn respill_front(&mut self, queued: Queued) {
        self.count(&queued);
        self.lane.push_front(queued);
    }

    fn count(&mut self, queued: &Queued) {
        self.lane_bytes += queued.bytes;
        self.lane_by_kind[queued.batch.kind] += queued.batch.len() as u64;
    }

    fn uncount(&mut self, queued: &Queued) {
        self.lane_bytes -= queued.bytes;
        self.lane_by_kind[queued.batch.kind] -= queued.batch.len() as u64;
    }

    /// Whether the lane has room for `bytes` more of a droppable kind (XIDs always fit).
    pub(crate) fn lane_has_room(&self, bytes: usize) -> bool {
        let limit = self.spool.as_ref().map_or(0, |s| s.write_buffer());
        // An oversized batch still enters an empty lane, or nothing could pass.
        self.lane.is_empty() || (self.lane_bytes + bytes) as u64 <= limit
    }

    /// Whether the lane is empty (a batch being written is not in it).
    #[cfg(test)]
    pub(crate) fn lane_is_empty(&self) -> bool {
        self.lane.is_empty()
    }

    /// Arrow memory of the batches in the lane.
    pub(crate) fn lane_bytes(&self) -> usize {
        self.lane_bytes
    }

    /// Events of `kind` waiting for the disk: in the lane, or being written.
    pub(crate) fn unwritten(&self, kind: EventKind) -> u64 {
        let writing = self
            .writing
            .filter(|w| w.kind == kind)
            .map_or(0, |w| w.events);
        self.lane_by_kind[kind] + writing
    }
}
