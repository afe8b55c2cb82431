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
    assert_eq!(limited.drop_oldest_droppable(), Some((EventKind::Cuda, 50)));
    assert!(limited.has_room(one));
    assert_eq!(drain(&mut limited), vec![2]);
}

#[test]
fn folders_are_0700_segments_0600_and_a_planted_symlink_is_not_followed() {
    use std::os::unix::fs::{symlink, PermissionsExt};
    use std::sync::Arc;
    let mode = |p: &Path| std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777;
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("spool/sink");
    let precious = root.path().join("precious");
    std::fs::write(&precious, b"root-owned content").unwrap();
    let spool = Spool::open(&dir, SpoolConfig::default()).unwrap();
    assert_eq!(mode(&root.path().join("spool")), 0o700);
    assert_eq!(mode(&dir), 0o700);
    // Someone who could write in the folder plants the next segment's temporary name.
    symlink(&precious, dir.join("0000000000000000.seg.tmp")).unwrap();

    // Through the queue, as in a run: the batch that hits the symlink is counted as
    // `spool_failed` (and logged); the next one takes the next name.
    let stats = Arc::new(crate::SinkStats::default());
    let options = crate::QueueOptions {
        name: "t".into(),
        buffer: crate::BufferConfig {
            max_events: 100,
            max_bytes: usize::MAX,
            when_full: crate::WhenFull::Block,
            ..crate::BufferConfig::default()
        },
        spool: Some(spool),
        shutdown_timeout: std::time::Duration::from_millis(100),
    };
    let (tx, mut rx) = crate::queue_with(options, stats.clone());
    tx.send_blocking(cuda(3, 1));
    tx.send_blocking(cuda(4, 2));
    drop(tx);
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            while let Some(batch) = rx.recv().await {
                rx.reject(batch);
            }
        });
    assert_eq!(std::fs::read(&precious).unwrap(), b"root-owned content");
    assert_eq!(mode(&precious), 0o644);
    assert_eq!(
        stats.dropped(crate::DropReason::SpoolFailed, EventKind::Cuda)
            + stats.spool_pending(EventKind::Cuda),
        7
    );
    assert!(stats.dropped(crate::DropReason::SpoolFailed, EventKind::Cuda) >= 3);
    let segments: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "seg"))
        .collect();
    assert!(!segments.is_empty());
    for segment in &segments {
        assert_eq!(mode(segment), 0o600, "{}", segment.display());
    }

    // A segment left 0644 by an older version is made private when the spool opens; the
    // planted name is removed (the link, not what it points to).
    std::fs::set_permissions(&segments[0], std::fs::Permissions::from_mode(0o644)).unwrap();
    let reopened = Spool::open(&dir, SpoolConfig::default()).unwrap();
    assert_eq!(mode(&segments[0]), 0o600);
    assert!(!dir.join("0000000000000000.seg.tmp").exists());
    assert_eq!(std::fs::read(&precious).unwrap(), b"root-owned content");
    assert_eq!(
        reopened.pending_events(EventKind::Cuda),
        stats.spool_pending(EventKind::Cuda)
    );
}

#[test]
fn a_spool_folder_writable_by_others_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let err = Spool::open(dir.path(), SpoolConfig::default()).unwrap_err();
    assert!(
        err.to_string().contains("is writable by group or others"),
        "{err}"
    );
}

#[test]
fn a_front_read_without_the_lock_is_taken_only_if_it_is_still_the_front() {
    let dir = tempfile::tempdir().unwrap();
    let config = SpoolConfig {
        fsync: FsyncPolicy::Never,
        ..SpoolConfig::default()
    };
    let mut spool = Spool::open(dir.path(), config).unwrap();
    for t in 1..=3 {
        spool.store(&cuda(10, t)).unwrap();
    }
    // Read, then taken: the index forgets it and the caller deletes the file.
    let front = spool.front().unwrap();
    assert_eq!(tag(&front.read().unwrap()), 1);
    let path = spool.take_front(&front).unwrap();
    assert!(path.exists(), "the file is the caller's to delete");
    std::fs::remove_file(path).unwrap();
    assert_eq!(spool.pending_events(EventKind::Cuda), 20);

    // Read, but dropped meanwhile to make room: what was read is not taken.
    let front = spool.front().unwrap();
    assert_eq!(tag(&front.read().unwrap()), 2);
    assert_eq!(spool.drop_oldest_droppable(), Some((EventKind::Cuda, 10)));
    assert_eq!(spool.take_front(&front), None);
    assert_eq!(spool.pending_events(EventKind::Cuda), 10);

    // A corrupt front is set aside once; a stale handle on it changes nothing.
    let front = spool.front().unwrap();
    let err = corrupt(&front.path, "test");
    assert_eq!(
        spool.quarantine_front(&front, &err),
        Some((EventKind::Cuda, 10))
    );
    assert_eq!(spool.quarantine_front(&front, &err), None);
    assert!(spool.is_empty());
    assert_eq!(spool.bytes(), 0);
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, [format!("{:016x}.seg.corrupt", 2)]);
}
