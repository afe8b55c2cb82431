//! Tests of the disk spool: order, restart, corruption, limits.

use super::*;
use crate::test_support::{cuda_batch as cuda, result_tag as tag};

fn drain(spool: &mut Spool) -> Vec<u32> {
    let mut tags = Vec::new();
    while let (Some(batch), _) = spool.peek() {
        tags.push(tag(&batch));
        spool.pop();
    }
    tags
}

#[test]
fn batches_come_back_in_order_and_identical_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let original = cuda(100, 1);
    {
        let mut spool = Spool::open(dir.path(), SpoolConfig::default()).unwrap();
        spool.store(&original).unwrap();
        spool.store(&cuda(3, 2)).unwrap();
        assert_eq!(spool.pending_events(EventKind::Cuda), 103);
    }
    let mut spool = Spool::open(dir.path(), SpoolConfig::default()).unwrap();
    assert_eq!(spool.pending_events(EventKind::Cuda), 103);
    let (first, corrupt) = spool.peek();
    assert!(corrupt.is_empty());
    assert_eq!(first.unwrap().records, original.records);
    spool.pop();
    spool.store(&cuda(1, 3)).unwrap();
    assert_eq!(drain(&mut spool), vec![2, 3]);
    assert!(spool.is_empty());
    assert_eq!(spool.bytes(), 0);
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn a_corrupt_segment_is_reported_set_aside_and_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let mut spool = Spool::open(
        dir.path(),
        SpoolConfig {
            fsync: FsyncPolicy::Never,
            ..SpoolConfig::default()
        },
    )
    .unwrap();
    for t in 1..=3 {
        spool.store(&cuda(10, t)).unwrap();
    }
    // Flip a payload byte of the second segment.
    let second = dir.path().join(format!("{:016x}.seg", 1));
    let mut bytes = std::fs::read(&second).unwrap();
    let last = bytes.len() - 20;
    bytes[last] ^= 0xff;
    std::fs::write(&second, bytes).unwrap();
    assert_eq!(spool.peek().0.map(|b| tag(&b)), Some(1));
    spool.pop();
    let (next, corrupt) = spool.peek();
    assert_eq!(corrupt, vec![(EventKind::Cuda, 10)]);
    assert_eq!(next.map(|b| tag(&b)), Some(3));
    assert!(dir.path().join(format!("{:016x}.seg.corrupt", 1)).exists());
}

#[test]
fn truncated_and_foreign_files_do_not_stop_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut spool = Spool::open(dir.path(), SpoolConfig::default()).unwrap();
        spool.store(&cuda(5, 1)).unwrap();
        spool.store(&cuda(5, 2)).unwrap();
    }
    let first = dir.path().join(format!("{:016x}.seg", 0));
    let len = std::fs::metadata(&first).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&first)
        .unwrap()
        .set_len(len - 7)
        .unwrap();
    std::fs::write(dir.path().join("0000000000000009.seg.tmp"), b"half").unwrap();
    std::fs::write(dir.path().join("notes.txt"), b"x").unwrap();
    let mut spool = Spool::open(dir.path(), SpoolConfig::default()).unwrap();
    assert_eq!(
        spool.pending_events(EventKind::Cuda),
        5,
        "the truncated segment is set aside"
    );
    assert_eq!(drain(&mut spool), vec![2]);
    assert!(!dir.path().join("0000000000000009.seg.tmp").exists());
}

#[test]
fn room_and_drop_oldest_follow_max_size() {
    let dir = tempfile::tempdir().unwrap();
    let mut spool = Spool::open(dir.path(), SpoolConfig::default()).unwrap();
    let one = spool.store(&cuda(50, 1)).unwrap();
    spool.store(&cuda(50, 2)).unwrap();
    let mut limited = Spool::open(
        dir.path(),
        SpoolConfig {
            max_size: one * 2,
            ..SpoolConfig::default()
        },
    )
    .unwrap();
    assert!(!limited.has_room(1));
    assert_eq!(limited.drop_oldest_cuda(), Some(50));
    assert!(limited.has_room(one));
    assert_eq!(drain(&mut limited), vec![2]);
}
