//! The XID journal as the queue holds it: the journal's spool (None until a sink with a spool
//! opens it, or when it cannot be opened) and the entries of XID batches handed to the sink and
//! not yet known settled. The rules (write ahead, release once settled, replay) are in
//! `queue/journal.rs`.

use crate::spool::{Spool, SpoolError};
use crate::EventBatch;

#[derive(Debug, Default)]
pub(crate) struct Journal {
    entries: Option<Spool>,
    handed: Vec<u64>,
}

impl Journal {
    /// Uses `entries` (opened, and replayed into memory) from now on.
    pub(crate) fn open(&mut self, entries: Spool) {
        self.entries = Some(entries);
    }

    /// Whether the queue has a journal.
    #[cfg(test)]
    pub(crate) fn is_open(&self) -> bool {
        self.entries.is_some()
    }

    /// Writes `batch` ahead; its entry, or the error. None without a journal.
    pub(crate) fn store(&mut self, batch: &EventBatch) -> Option<Result<u64, SpoolError>> {
        let entries = self.entries.as_mut()?;
        let seq = entries.next_seq();
        Some(entries.store(batch).map(|_| seq))
    }

    /// The batch of entry `seq` was handed to the sink.
    pub(crate) fn handed(&mut self, seq: u64) {
        self.handed.push(seq);
    }

    /// Deletes entry `seq` (its batch is safe elsewhere: in the spool).
    pub(crate) fn remove(&mut self, seq: u64) {
        if let Some(entries) = self.entries.as_mut() {
            entries.remove(seq);
        }
    }

    /// Deletes the entries of every batch handed to the sink (it settled them all).
    pub(crate) fn release_handed(&mut self) {
        if self.handed.is_empty() {
            return;
        }
        let handed = std::mem::take(&mut self.handed);
        if let Some(entries) = self.entries.as_mut() {
            for seq in handed {
                entries.remove(seq);
            }
        }
    }
}
