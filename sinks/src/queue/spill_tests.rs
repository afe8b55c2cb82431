//! Tests of the spill lane: a stalled spool disk (the writer thread held before each write)
//! never blocks the producer until the lane is full, the policies apply to a full lane, order
//! is kept between memory, lane and spool, and the lane reaches the disk at shutdown.

use std::time::Duration;

use super::test_helpers::{
    block_on, config, lane_queue, segments, send_in_thread, wait_until_writing,
};
use super::*;
use crate::stats::DropReason;
use crate::test_support::{cuda_batch as cuda, result_tag as tag};

#[test]
fn a_stalled_spool_disk_never_blocks_the_producer_and_order_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let stats = Arc::new(SinkStats::default());
    let (tx, mut rx) = lane_queue(dir.path(), config(4, WhenFull::Block), 32 << 20, &stats);
    let gate = tx.shared.writer_gate.lock().unwrap();
    // The sink takes nothing yet: memory (4 events) fills and the rest goes to the spool,
    // whose disk is stalled. Every send still returns at once.
    for t in 0..=10 {
        let returned = send_in_thread(&tx, cuda(4, t));
        assert!(
            returned.recv_timeout(Duration::from_secs(10)).is_ok(),
            "send {t} waited for the stalled disk"
        );
    }
    assert_eq!(
        stats.spooled.get(EventKind::Cuda),
        0,
        "nothing reached the disk"
    );
    assert_eq!(stats.queued_events_of(EventKind::Cuda), 44);
    assert_eq!(stats.in_flight(EventKind::Cuda), 44);
    assert_eq!(stats.dropped_total(EventKind::Cuda), 0);
    assert_eq!(segments(dir.path()), 0);
    // The disk comes back while the sink takes: every batch comes out once, in order.
    drop(gate);
    let mut tags = Vec::new();
    while tags.len() < 11 {
        let batch = block_on(rx.recv()).expect("a batch");
        tags.push(tag(&batch));
        stats.delivered.add(batch.kind, batch.len() as u64);
        rx.delivered();
    }
    assert_eq!(tags, (0..=10).collect::<Vec<_>>());
    tx.wait_until_written();
    assert_eq!(stats.in_flight(EventKind::Cuda), 0);
    assert_eq!(stats.delivered.get(EventKind::Cuda), 44);
    assert_eq!(stats.dropped_total(EventKind::Cuda), 0);
    assert_eq!(
        segments(dir.path()),
        0,
        "every segment replayed and deleted"
    );
}

#[test]
fn a_full_lane_drops_the_newest_batch_as_buffer_full() {
    let dir = tempfile::tempdir().unwrap();
    let stats = Arc::new(SinkStats::default());
    // A 1-byte lane holds one batch at a time (an oversized batch enters an empty lane).
    let (tx, _rx) = lane_queue(dir.path(), config(4, WhenFull::DropNewest), 1, &stats);
    let gate = tx.shared.writer_gate.lock().unwrap();
    tx.send_blocking(cuda(4, 0)); // memory
    tx.send_blocking(cuda(4, 1)); // lane; the writer takes it and waits at the gate
    wait_until_writing(&tx);
    tx.send_blocking(cuda(4, 2)); // lane
    tx.send_blocking(cuda(4, 3)); // lane full: dropped
    assert_eq!(stats.dropped(DropReason::BufferFull, EventKind::Cuda), 4);
    assert_eq!(stats.queued_events_of(EventKind::Cuda), 12);
    drop(gate);
    tx.wait_until_written();
    assert_eq!(stats.spooled.get(EventKind::Cuda), 8);
    assert_eq!(segments(dir.path()), 2);
    assert_eq!(stats.in_flight(EventKind::Cuda), 4, "the batch in memory");
}

#[test]
fn a_full_lane_makes_block_wait_for_the_disk_and_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let stats = Arc::new(SinkStats::default());
    let (tx, _rx) = lane_queue(dir.path(), config(4, WhenFull::Block), 1, &stats);
    let gate = tx.shared.writer_gate.lock().unwrap();
    tx.send_blocking(cuda(4, 0));
    tx.send_blocking(cuda(4, 1));
    wait_until_writing(&tx);
    tx.send_blocking(cuda(4, 2));
    let returned = send_in_thread(&tx, cuda(4, 3));
    assert!(
        returned.recv_timeout(Duration::from_millis(300)).is_err(),
        "block returned while the lane was full"
    );
    drop(gate);
    assert!(returned.recv_timeout(Duration::from_secs(10)).is_ok());
    tx.wait_until_written();
    assert_eq!(stats.spooled.get(EventKind::Cuda), 12);
    assert_eq!(stats.dropped_total(EventKind::Cuda), 0);
    assert_eq!(segments(dir.path()), 3);
}

#[test]
fn the_lane_reaches_the_disk_when_the_sink_ends_and_the_next_run_replays_it_in_order() {
    let dir = tempfile::tempdir().unwrap();
    {
        let stats = Arc::new(SinkStats::default());
        let (tx, rx) = lane_queue(dir.path(), config(4, WhenFull::Block), 32 << 20, &stats);
        let gate = tx.shared.writer_gate.lock().unwrap();
        tx.send_blocking(cuda(4, 0)); // memory: dropped as sink_stopped when the sink ends
        for t in 1..=5 {
            tx.send_blocking(cuda(4, t));
        }
        wait_until_writing(&tx);
        // The sink ends while the disk is stalled: its end waits for the write in flight and
        // writes the rest of the lane itself.
        let sink_end = std::thread::spawn(move || drop(rx));
        std::thread::sleep(Duration::from_millis(200));
        assert!(
            !sink_end.is_finished(),
            "the end did not wait for the write"
        );
        drop(gate);
        sink_end.join().unwrap();
        assert_eq!(stats.spooled.get(EventKind::Cuda), 20);
        assert_eq!(stats.dropped(DropReason::SinkStopped, EventKind::Cuda), 4);
        assert_eq!(stats.in_flight(EventKind::Cuda), 0);
        assert_eq!(segments(dir.path()), 5);
    }
    let stats = Arc::new(SinkStats::default());
    let (_tx, mut rx) = lane_queue(dir.path(), config(4, WhenFull::Block), 32 << 20, &stats);
    let tags: Vec<u32> = (0..5)
        .map(|_| tag(&block_on(rx.recv()).expect("a replayed batch")))
        .collect();
    assert_eq!(tags, vec![1, 2, 3, 4, 5]);
    assert_eq!(stats.replayed.get(EventKind::Cuda), 20);
}
