//! The state of a sink's queue behind its lock, one part per concern, each with private fields
//! and a small API:
//!
//! - [`MemoryLanes`]: batches waiting in memory, the kept lane (XIDs) ahead of the droppable
//!   one, and their counts;
//! - [`Disk`]: the spool, the spill lane in front of it, and the batch its writer thread is
//!   writing;
//! - [`Journal`]: the XID journal, and the entries of batches handed to the sink;
//! - [`Handoff`]: what was handed to the sink and handed back, and since when it owes an
//!   acknowledgement;
//! - [`Health`]: stalled, failing, and when to try again;
//! - [`Ends`]: the producers and the receiver, and when the queue closed.
//!
//! The queue's rules (admission, taking, spilling, the journal's release, stall detection)
//! live in `sender.rs`, `receiver.rs`, `spill.rs`, `journal.rs` and `Shared`; they change
//! these parts only through their methods, so each part's counts always match its contents.

mod disk;
mod ends;
mod handoff;
mod health;
mod journal;
mod memory;

pub(crate) use disk::Disk;
pub(crate) use ends::Ends;
pub(crate) use handoff::Handoff;
pub(crate) use health::Health;
pub(crate) use journal::Journal;
pub(crate) use memory::MemoryLanes;

use std::time::Instant;

use crate::spool::Spool;

#[derive(Debug)]
pub(crate) struct State {
    pub(crate) memory: MemoryLanes,
    pub(crate) disk: Disk,
    pub(crate) journal: Journal,
    pub(crate) handoff: Handoff,
    pub(crate) health: Health,
    pub(crate) ends: Ends,
}

impl State {
    /// A queue's state at start: nothing in memory, `spool` (when the sink has one) as it was
    /// opened, no journal yet, one sender and the receiver.
    pub(crate) fn new(spool: Option<Spool>, now: Instant) -> Self {
        Self {
            memory: MemoryLanes::default(),
            disk: Disk::new(spool),
            journal: Journal::default(),
            handoff: Handoff::new(now),
            health: Health::new(),
            ends: Ends::new(),
        }
    }
}
