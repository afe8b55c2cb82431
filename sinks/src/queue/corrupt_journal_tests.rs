//! Tests of XIDs lost to a damaged XID journal: every kind of damage a previous run's journal
//! can come back with is counted as dropped (`spool_corrupt`), with exact XID counts, even when
//! the kernel-log reader looked at the journal first (as the agent does at start).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::test_helpers::{acknowledge, block_on, config};
use super::*;
use crate::stats::DropReason;
use crate::test_support::{xid_batch_with, xid_record};

/// Three XIDs in one batch (one journal segment).
fn three_xids(tag: u32) -> EventBatch {
    xid_batch_with(&[
        xid_record(tag, "0000:3b:00.0", "a"),
        xid_record(tag, "0000:3b:00.0", "b"),
        xid_record(tag, "0000:3b:00.0", "c"),
    ])
}

/// A queue named `t` on the spool at `dir`.
fn open(dir: &Path, stats: &Arc<SinkStats>) -> (QueueSender, QueueReceiver) {
    let options = QueueOptions {
        name: "t".into(),
        buffer: config(100, WhenFull::Block),
        spool: Some(crate::Spool::open(dir, crate::SpoolConfig::default()).unwrap()),
        shutdown_timeout: Duration::from_secs(5),
    };
    queue_with(options, stats.clone())
}

/// Journals `batches` batches of three XIDs that are never delivered (a run killed while its
/// sink was down); returns the journal's segment files, oldest first.
fn journal_of(dir: &Path, batches: u32) -> Vec<PathBuf> {
    let stats = Arc::new(SinkStats::default());
    let (tx, rx) = open(dir, &stats);
    for tag in 0..batches {
        tx.send_blocking(three_xids(tag));
    }
    drop(tx);
    drop(rx);
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir.join(JOURNAL_DIR))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "seg"))
        .collect();
    files.sort();
    assert_eq!(files.len(), batches as usize);
    files
}

/// What the next run counts for the journal at `dir`: (XIDs dropped as spool_corrupt, corrupt
/// segments, XIDs replayed and delivered, XIDs received). The kernel-log reader reads the
/// journal first, as at the agent's start.
fn next_run(dir: &Path) -> (u64, u64, u64, u64) {
    let seen_first: usize = journaled_xids(dir).iter().map(|b| b.len()).sum();
    let stats = Arc::new(SinkStats::default());
    let (tx, mut rx) = open(dir, &stats);
    drop(tx);
    block_on(async {
        while let Some(batch) = rx.recv().await {
            acknowledge(&rx, &stats, &batch);
        }
    });
    let delivered = stats.delivered.get(EventKind::Xid);
    assert!(seen_first as u64 >= delivered);
    assert_eq!(
        stats.in_flight(EventKind::Xid),
        0,
        "every XID accounted for"
    );
    (
        stats.dropped(DropReason::SpoolCorrupt, EventKind::Xid),
        stats.corrupt_segments(),
        delivered,
        stats.received.get(EventKind::Xid),
    )
}

/// Damages the first segment of a journal of two with `damage`; returns the counts.
fn damaged(damage: impl FnOnce(&Path, Vec<u8>)) -> (u64, u64, u64, u64) {
    let dir = tempfile::tempdir().unwrap();
    let files = journal_of(dir.path(), 2);
    let data = std::fs::read(&files[0]).unwrap();
    damage(&files[0], data);
    next_run(dir.path())
}

#[test]
fn a_truncated_journal_segment_counts_the_xids_its_header_names() {
    let counts = damaged(|path, data| std::fs::write(path, &data[..data.len() - 7]).unwrap());
    assert_eq!(counts, (3, 1, 3, 6));
}

#[test]
fn a_journal_segment_with_a_bad_length_counts_the_xids_its_header_names() {
    let counts = damaged(|path, mut data| {
        data[16..24].copy_from_slice(&u64::MAX.to_le_bytes());
        std::fs::write(path, data).unwrap();
    });
    assert_eq!(counts, (3, 1, 3, 6));
}

#[test]
fn a_journal_segment_with_a_bad_checksum_counts_the_xids_its_header_names() {
    let counts = damaged(|path, mut data| {
        let last = data.len() - 1;
        data[last] ^= 0xff;
        std::fs::write(path, data).unwrap();
    });
    assert_eq!(counts, (3, 1, 3, 6));
}

#[test]
fn a_garbage_journal_segment_counts_one_xid_and_one_segment() {
    // The header is gone: how many XIDs it held cannot be known; at least one was lost.
    let counts = damaged(|path, data| std::fs::write(path, vec![0x5a; data.len()]).unwrap());
    assert_eq!(counts, (1, 1, 3, 4));
}

#[test]
fn an_empty_journal_segment_counts_one_xid_and_one_segment() {
    let counts = damaged(|path, _| std::fs::write(path, b"").unwrap());
    assert_eq!(counts, (1, 1, 3, 4));
}

#[test]
fn a_folder_under_a_journal_segment_name_counts_one_xid_and_one_segment() {
    let counts = damaged(|path, _| {
        std::fs::remove_file(path).unwrap();
        std::fs::create_dir(path).unwrap();
    });
    assert_eq!(counts, (1, 1, 3, 4));
}

#[test]
fn every_damage_at_once_is_counted_segment_by_segment() {
    let dir = tempfile::tempdir().unwrap();
    let files = journal_of(dir.path(), 6);
    let data = std::fs::read(&files[0]).unwrap();
    std::fs::write(&files[0], &data[..40]).unwrap(); // truncated: 3
    let mut bad_length = std::fs::read(&files[1]).unwrap();
    bad_length[16..24].copy_from_slice(&1u64.to_le_bytes());
    std::fs::write(&files[1], bad_length).unwrap(); // bad length: 3
    std::fs::write(&files[2], b"garbage").unwrap(); // garbage: 1
    std::fs::write(&files[3], b"").unwrap(); // empty: 1
    let mut checksum = std::fs::read(&files[4]).unwrap();
    checksum[40] ^= 0x01;
    std::fs::write(&files[4], checksum).unwrap(); // checksum: 3
                                                  // files[5] intact: 3 replayed.
    assert_eq!(next_run(dir.path()), (3 + 3 + 1 + 1 + 3, 5, 3, 14));
    // Set aside, not counted again by the run after.
    assert_eq!(next_run(dir.path()), (0, 0, 0, 0));
}
