//! The XID journal of a sink's queue: every batch of a kind that is kept
//! ([`Retention::Kept`]: XIDs) written ahead (fsynced) as it arrives, replayed first by the
//! next run, and deleted once the sink has settled every kept event it was handed. Also what a
//! previous run left in a spool at start (corrupt segments counted).

use std::path::Path;

use super::{Queued, Shared, State};
use crate::spool::Spool;
use crate::stats::SinkStats;
use crate::{EventBatch, EventKind, Retention};

impl Shared {
    /// Writes an XID batch ahead to the journal; its entry, None without a journal or when the
    /// write failed (logged: the batch is still delivered from memory).
    pub(crate) fn journal_store(&self, state: &mut State, batch: &EventBatch) -> Option<u64> {
        match state.journal.store(batch)? {
            Ok(seq) => Some(seq),
            Err(err) => {
                self.warn_limited(
                    &self.journal_warning,
                    "cannot write the XID journal; these XIDs are only in memory",
                    &err,
                );
                None
            }
        }
    }

    /// Deletes the journal entries of handed XID batches once the sink holds nothing
    /// unsettled: then every one of them was delivered, failed, refused, or handed back (and
    /// journaled again).
    pub(crate) fn release_journal(&self, state: &mut State) {
        let kept = EventKind::all().filter(|kind| kind.retention() == Retention::Kept);
        if kept
            .map(|kind| state.handoff.in_sink(&self.stats, kind))
            .sum::<u64>()
            > 0
        {
            return;
        }
        state.handoff.kept_settled();
        state.journal.release_handed();
    }
}

/// Counts the segments `spool` quarantined at open as received and dropped (`spool_corrupt`):
/// the events the header claims, or one (at least one was lost) when it is unreadable, of
/// `kind` unless the header names another (the journal holds XIDs only).
pub(super) fn count_corrupt_at_open(
    name: &str,
    spool: &mut Spool,
    stats: &SinkStats,
    kind: EventKind,
) {
    for segment in spool.take_corrupt_at_open() {
        let kind = segment.kind.unwrap_or(kind);
        let events = segment.events.unwrap_or(1);
        stats.received.add(kind, events);
        stats.drop_corrupt_segment(kind, events);
        tracing::error!(sink = %name, kind = %kind, events, header_readable = segment.events.is_some(), "corrupt spool segment found at start; its events are counted as dropped (spool_corrupt)");
    }
}

/// The XID journal beside the spool; None (logged) when it cannot be opened.
pub(super) fn open_journal(name: &str, spool: &Spool, stats: &SinkStats) -> Option<Spool> {
    let dir = spool.dir().join(JOURNAL_DIR);
    let config = crate::spool::SpoolConfig {
        enabled: true,
        max_size: u64::MAX,
        fsync: crate::spool::FsyncPolicy::Always,
        // Written by the producer itself (written ahead), never through a spill lane.
        ..crate::spool::SpoolConfig::default()
    };
    match Spool::open(&dir, config) {
        Ok(mut journal) => {
            count_corrupt_at_open(name, &mut journal, stats, EventKind::Xid);
            Some(journal)
        }
        Err(err) => {
            tracing::error!(sink = %name, %err, "cannot open the XID journal; XIDs are kept in memory only until delivered");
            None
        }
    }
}

/// Puts the XIDs a previous run journaled but did not deliver at the head of the XID lane,
/// still journaled until delivered.
pub(super) fn replay_journal(name: &str, mut journal: Spool, state: &mut State, stats: &SinkStats) {
    let mut replayed = 0;
    for seq in journal.sequence_numbers() {
        match journal.read(seq) {
            Ok(batch) => {
                let events = batch.len() as u64;
                stats.received.add(batch.kind, events);
                replayed += events;
                let bytes = batch.records.get_array_memory_size();
                state.memory.push(
                    Queued {
                        batch,
                        bytes,
                        journal: Some(seq),
                    },
                    false,
                );
            }
            Err(err) => {
                let events = journal.remove(seq).unwrap_or(0);
                stats.received.add(EventKind::Xid, events);
                stats.drop_corrupt_segment(EventKind::Xid, events);
                tracing::error!(sink = %name, %err, events, "corrupt XID journal entry; counted as dropped (spool_corrupt)");
            }
        }
    }
    if replayed > 0 {
        tracing::warn!(sink = %name, events = replayed, "XIDs journaled by a previous run and not delivered: sending them first");
    }
    state.journal.open(journal);
}

/// The XID batches in the journal of the spool at `spool_dir`, as a previous run left them
/// (read-only; for the kernel-log reader, which must not read again what is journaled).
pub fn journaled_xids(spool_dir: &Path) -> Vec<EventBatch> {
    let dir = spool_dir.join(JOURNAL_DIR);
    if !dir.is_dir() {
        return Vec::new();
    }
    // Read-only: the queue opens the journal later and must still find (and count) what is
    // corrupt in it.
    Spool::read_only(&dir)
}

/// The XID journal's folder inside a sink's spool folder.
pub const JOURNAL_DIR: &str = "xid-journal";
