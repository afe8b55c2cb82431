//! Tests of the spill lane against a full spool: a real full disk, `block` waiting for room
//! instead of dropping, XIDs never dropped or kept waiting behind CUDA batches, and the
//! shutdown deadline while a write hangs.

use std::time::Duration;

use super::test_helpers::{
    block_on, config, lane_queue, one_segment_spool, segments, wait_until_writing,
};
use super::*;
use crate::stats::DropReason;
use crate::test_support::{cuda_batch as cuda, result_tag as tag};

#[test]
#[cfg_attr(
    not(feature = "root-tests"),
    ignore = "needs root: `make test` runs it"
)]
fn a_full_spool_disk_counts_every_batch_it_cannot_write_and_keeps_the_rest_whole() {
    let Some(disk) = crate::small_disk::SmallDisk::mount("64k") else {
        panic!("mounting a tmpfs needs root, as the tests run in CI");
    };
    let dir = disk.path().join("spool");
    let stats = Arc::new(SinkStats::default());
    let (tx, _rx) = lane_queue(&dir, config(4, WhenFull::Block), 32 << 20, &stats);
    // Nobody takes: one batch in memory, 99 bound for a spool that fills part way.
    for t in 0..100 {
        tx.send_blocking(cuda(4, t));
    }
    tx.wait_until_written();
    let spooled = stats.spooled.get(EventKind::Cuda);
    let failed = stats.dropped(DropReason::SpoolFailed, EventKind::Cuda);
    assert!(
        spooled > 0 && failed > 0,
        "spooled {spooled}, failed {failed}"
    );
    assert_eq!(spooled + failed, 99 * 4);
    assert_eq!(stats.in_flight(EventKind::Cuda), 4, "the batch in memory");
    assert_eq!(segments(&dir) as u64, spooled / 4);
    let leftovers: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "partial segments left: {leftovers:?}");
    // Every segment on disk reads back whole.
    let mut spool = crate::Spool::open(&dir, crate::SpoolConfig::default()).unwrap();
    let mut read = 0;
    while let (Some(batch), corrupt) = spool.peek() {
        assert!(corrupt.is_empty());
        read += batch.len() as u64;
        spool.pop();
    }
    assert_eq!(read, spooled);
}

#[test]
fn under_block_a_batch_that_finds_the_spool_full_when_written_waits_instead_of_dropping() {
    let dir = tempfile::tempdir().unwrap();
    let stats = Arc::new(SinkStats::default());
    let options = QueueOptions {
        name: "t".into(),
        buffer: config(4, WhenFull::Block),
        spool: Some(crate::Spool::open(dir.path(), one_segment_spool()).unwrap()),
        shutdown_timeout: Duration::from_secs(30),
    };
    let (tx, mut rx) = queue_with(options, stats.clone());
    let gate = tx.shared.writer_gate.lock().unwrap();
    tx.send_blocking(cuda(4, 0)); // memory
    tx.send_blocking(cuda(4, 1)); // lane; the writer takes it and waits at the gate
    wait_until_writing(&tx);
    // The spool is still empty, so this one is admitted; once batch 1 is on disk it does not fit.
    tx.send_blocking(cuda(4, 2));
    drop(gate);
    // Batch 1 reaches the disk; then the writer has batch 2 in hand and no room for it.
    for _ in 0..2000 {
        if stats.spooled.get(EventKind::Cuda) == 4 {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(stats.spooled.get(EventKind::Cuda), 4);
    // Time to drop it, as the code before this test did; it must wait instead.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(stats.dropped_total(EventKind::Cuda), 0, "block never drops");
    assert_eq!(stats.spooled.get(EventKind::Cuda), 4);
    assert_eq!(
        stats.queued_events_of(EventKind::Cuda),
        8,
        "batch 2 waits in the lane"
    );
    // The sink comes back: the replay makes room, and every batch comes out once, in order.
    let mut tags = Vec::new();
    while tags.len() < 3 {
        let batch = block_on(rx.recv()).expect("a batch");
        tags.push(tag(&batch));
        stats.delivered.add(batch.kind, batch.len() as u64);
        rx.delivered();
    }
    assert_eq!(tags, vec![0, 1, 2]);
    assert_eq!(stats.dropped_total(EventKind::Cuda), 0);
}

#[test]
fn drop_oldest_on_a_full_lane_never_drops_an_xid() {
    let dir = tempfile::tempdir().unwrap();
    // A file where the XID journal's folder would be: no journal, so XIDs behind a backlog
    // take the spill lane like any batch.
    std::fs::create_dir_all(dir.path()).unwrap();
    let spool = crate::Spool::open(
        dir.path(),
        crate::SpoolConfig {
            write_buffer: 1,
            ..crate::SpoolConfig::default()
        },
    )
    .unwrap();
    std::fs::write(dir.path().join(crate::queue::JOURNAL_DIR), b"not a folder").unwrap();
    let stats = Arc::new(SinkStats::default());
    let options = QueueOptions {
        name: "t".into(),
        buffer: config(4, WhenFull::DropOldest),
        spool: Some(spool),
        shutdown_timeout: Duration::from_secs(30),
    };
    let (tx, _rx) = queue_with(options, stats.clone());
    assert!(!tx.shared.lock().journal.is_open());
    let gate = tx.shared.writer_gate.lock().unwrap();
    tx.send_blocking(cuda(4, 0)); // memory
    tx.send_blocking(cuda(4, 1)); // lane, taken by the writer
    wait_until_writing(&tx);
    tx.send_blocking(crate::test_support::xid_batch()); // behind the backlog: the lane
    tx.send_blocking(cuda(4, 2)); // the lane is full: only droppable batches may go
    tx.send_blocking(cuda(4, 3)); // full again: batch 2 goes, the XID stays
    assert_eq!(stats.dropped_total(EventKind::Xid), 0);
    assert_eq!(stats.dropped(DropReason::BufferFull, EventKind::Cuda), 4);
    drop(gate);
    tx.wait_until_written();
    assert_eq!(stats.spooled.get(EventKind::Xid), 1);
    assert_eq!(stats.spooled.get(EventKind::Cuda), 8, "batches 1 and 3");
}

#[test]
fn at_the_shutdown_deadline_the_lane_is_written_behind_memory_and_a_write_in_flight() {
    let dir = tempfile::tempdir().unwrap();
    {
        let stats = Arc::new(SinkStats::default());
        let options = QueueOptions {
            name: "t".into(),
            buffer: config(4, WhenFull::Block),
            spool: Some(crate::Spool::open(dir.path(), crate::SpoolConfig::default()).unwrap()),
            shutdown_timeout: Duration::from_millis(50),
        };
        let (tx, mut rx) = queue_with(options, stats.clone());
        let shared = tx.shared.clone();
        let gate = shared.writer_gate.lock().unwrap();
        tx.send_blocking(cuda(4, 0)); // memory
        for t in 1..=4 {
            tx.send_blocking(cuda(4, t)); // 1 in flight at the gate, 2..=4 in the lane
        }
        wait_until_writing(&tx);
        drop(tx);
        // Past the deadline the receiver writes memory and the lane itself, while the
        // writer is still stuck in batch 1's write.
        std::thread::sleep(Duration::from_millis(100));
        assert!(block_on(rx.recv()).is_none());
        assert_eq!(
            stats.spooled.get(EventKind::Cuda),
            16,
            "memory and the lane"
        );
        drop(gate);
        let state = shared.wait_for_writer(shared.lock());
        assert!(state.disk.lane_is_empty());
        drop(state);
        assert_eq!(stats.spooled.get(EventKind::Cuda), 20);
        assert_eq!(stats.in_flight(EventKind::Cuda), 0);
        assert_eq!(stats.dropped_total(EventKind::Cuda), 0);
    }
    let stats = Arc::new(SinkStats::default());
    let (_tx, mut rx) = lane_queue(dir.path(), config(4, WhenFull::Block), 32 << 20, &stats);
    let tags: Vec<u32> = (0..5)
        .map(|_| tag(&block_on(rx.recv()).expect("a replayed batch")))
        .collect();
    // Batch 1's name was taken before the deadline's writes: it comes back first.
    assert_eq!(tags, vec![1, 0, 2, 3, 4]);
}

#[test]
fn a_sink_that_ends_refuses_new_batches_while_it_waits_for_the_disk() {
    let dir = tempfile::tempdir().unwrap();
    let stats = Arc::new(SinkStats::default());
    let (tx, rx) = lane_queue(dir.path(), config(4, WhenFull::Block), 32 << 20, &stats);
    let gate = tx.shared.writer_gate.lock().unwrap();
    tx.send_blocking(cuda(4, 0)); // memory
    tx.send_blocking(cuda(4, 1)); // taken by the writer, stuck at the gate
    wait_until_writing(&tx);
    let sink_end = std::thread::spawn(move || drop(rx));
    for _ in 0..2000 {
        if !tx.shared.lock().ends.receiver_alive() {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    // The end waits for the stuck write; a batch sent meanwhile is refused at once, counted,
    // and never joins the lane it would have to wait behind.
    tx.send_blocking(cuda(4, 2));
    assert_eq!(stats.dropped(DropReason::SinkStopped, EventKind::Cuda), 4);
    assert!(tx.shared.lock().disk.lane_is_empty());
    assert!(!sink_end.is_finished());
    drop(gate);
    sink_end.join().unwrap();
    assert_eq!(stats.spooled.get(EventKind::Cuda), 4, "batch 1");
    assert_eq!(
        stats.dropped(DropReason::SinkStopped, EventKind::Cuda),
        8,
        "batches 0 (memory) and 2"
    );
    assert_eq!(stats.in_flight(EventKind::Cuda), 0);
}

#[test]
fn an_xid_behind_a_batch_waiting_for_a_full_spool_is_written_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let spool = crate::Spool::open(dir.path(), one_segment_spool()).unwrap();
    // No journal (a file where its folder would be): the XID takes the lane.
    std::fs::write(dir.path().join(crate::queue::JOURNAL_DIR), b"not a folder").unwrap();
    let stats = Arc::new(SinkStats::default());
    let options = QueueOptions {
        name: "t".into(),
        buffer: config(4, WhenFull::Block),
        spool: Some(spool),
        shutdown_timeout: Duration::from_secs(30),
    };
    let (tx, _rx) = queue_with(options, stats.clone());
    let gate = tx.shared.writer_gate.lock().unwrap();
    tx.send_blocking(cuda(4, 0)); // memory
    tx.send_blocking(cuda(4, 1)); // taken by the writer: it fills the spool
    wait_until_writing(&tx);
    tx.send_blocking(cuda(4, 2)); // will wait for room under block
    tx.send_blocking(crate::test_support::xid_batch()); // behind it
    drop(gate);
    for _ in 0..2000 {
        if stats.spooled.get(EventKind::Xid) == 1 {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(stats.spooled.get(EventKind::Xid), 1, "the XID is on disk");
    assert_eq!(
        stats.spooled.get(EventKind::Cuda),
        4,
        "batch 1; batch 2 waits"
    );
    assert_eq!(stats.dropped_total(EventKind::Cuda), 0);
    assert_eq!(stats.queued_events_of(EventKind::Cuda), 8);
}
