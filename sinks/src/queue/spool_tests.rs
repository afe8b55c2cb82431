//! Tests of a queue with a spool: spilling when memory is full or the sink stalls, replay in
//! order with XIDs first, the XID journal across crashes, full and corrupt spools, and the
//! shutdown deadline.

use std::time::Duration;

use super::test_helpers::{
    acknowledge, block_on, config, queue_with_spool, segments, spooled_queue,
};
use super::*;
use crate::stats::DropReason;
use crate::test_support::{cuda_batch as cuda, driver_batch, result_tag as tag, xid_batch as xid};

#[test]
fn a_failing_sink_spills_to_the_spool_and_replays_in_order_with_xids_first() {
    let dir = tempfile::tempdir().unwrap();
    let stats = Arc::new(SinkStats::default());
    let (tx, mut rx) = spooled_queue(dir.path(), config(8, WhenFull::Block), &stats);
    tx.send_blocking(cuda(4, 1));
    let first = block_on(rx.recv()).unwrap();
    rx.reject(first); // the destination failed: batch 1 goes back, the sink is unhealthy
    tx.send_blocking(cuda(4, 2)); // fits in memory
    tx.send_blocking(cuda(4, 3)); // memory full: spooled, not blocked
    tx.send_blocking(xid()); // journaled, kept in memory ahead of everything
    tx.send_blocking(cuda(4, 4)); // behind the backlog
    tx.wait_until_written();
    assert_eq!(stats.spooled.get(EventKind::Cuda), 8);
    assert_eq!(stats.spool_pending(EventKind::Xid), 0);
    assert_eq!(stats.queued_events_of(EventKind::Xid), 1);
    assert_eq!(stats.queued_events_of(EventKind::Cuda), 8);
    assert_eq!(
        segments(dir.path()),
        3,
        "two CUDA segments and one journal entry"
    );
    assert_eq!(
        stats.in_flight(EventKind::Cuda),
        8,
        "batches 1 and 2 in memory"
    );
    drop(tx);
    let started = std::time::Instant::now();
    let order: Vec<(EventKind, u32)> = block_on(async {
        let mut v = vec![];
        while let Some(b) = rx.recv().await {
            v.push((
                b.kind,
                if b.kind == EventKind::Cuda {
                    tag(&b)
                } else {
                    0
                },
            ));
            acknowledge(&rx, &stats, &b);
        }
        v
    });
    assert!(
        started.elapsed() >= Duration::from_millis(400),
        "the retry waited for the backoff"
    );
    assert_eq!(
        order,
        vec![
            (EventKind::Xid, 0),
            (EventKind::Cuda, 1),
            (EventKind::Cuda, 2),
            (EventKind::Cuda, 3),
            (EventKind::Cuda, 4)
        ]
    );
    assert_eq!(stats.replayed.get(EventKind::Cuda), 8);
    assert_eq!(stats.spool_pending(EventKind::Cuda), 0);
    assert_eq!(stats.dropped_total(EventKind::Cuda), 0);
    assert_eq!(segments(dir.path()), 0, "spool and journal empty");
}

#[test]
fn an_xid_survives_a_crash_in_the_journal_and_is_sent_first_by_the_next_run() {
    let dir = tempfile::tempdir().unwrap();
    {
        let stats = Arc::new(SinkStats::default());
        let (tx, mut rx) = spooled_queue(dir.path(), config(100, WhenFull::Block), &stats);
        tx.send_blocking(xid());
        assert_eq!(segments(dir.path()), 1, "written ahead at once");
        // The sink took it, then the process died before the destination acknowledged.
        let taken = block_on(rx.recv()).unwrap();
        assert_eq!(taken.kind, EventKind::Xid);
        std::mem::forget(rx);
        std::mem::forget(tx);
    }
    let stats = Arc::new(SinkStats::default());
    let (tx, mut rx) = spooled_queue(dir.path(), config(100, WhenFull::Block), &stats);
    assert_eq!(stats.received.get(EventKind::Xid), 1);
    tx.send_blocking(cuda(2, 7));
    let first = block_on(rx.recv()).unwrap();
    assert_eq!(first.kind, EventKind::Xid);
    assert_eq!(segments(dir.path()), 1, "kept until acknowledged");
    acknowledge(&rx, &stats, &first);
    assert_eq!(segments(dir.path()), 0, "released once settled");
    let second = block_on(rx.recv()).unwrap();
    assert_eq!(tag(&second), 7);
    assert_eq!(stats.in_flight(EventKind::Xid), 0);
}

#[test]
fn a_journal_entry_stays_while_any_handed_xid_is_unsettled() {
    let dir = tempfile::tempdir().unwrap();
    let stats = Arc::new(SinkStats::default());
    let (tx, mut rx) = spooled_queue(dir.path(), config(100, WhenFull::Block), &stats);
    tx.send_blocking(xid());
    tx.send_blocking(xid());
    let a = block_on(rx.recv()).unwrap();
    let b = block_on(rx.recv()).unwrap();
    // b is acknowledged before a: a's entry must survive, so both stay for now.
    acknowledge(&rx, &stats, &b);
    assert_eq!(segments(dir.path()), 2);
    // a fails and comes back: journaled again, the two old entries go.
    rx.reject(a);
    assert_eq!(segments(dir.path()), 1);
    let again = block_on(rx.recv()).unwrap();
    acknowledge(&rx, &stats, &again);
    assert_eq!(segments(dir.path()), 0);
    assert_eq!(stats.delivered.get(EventKind::Xid), 2);
    drop(tx);
}

#[test]
fn a_sink_that_stops_taking_is_stalled_and_block_spills_instead_of_waiting() {
    let dir = tempfile::tempdir().unwrap();
    let stats = Arc::new(SinkStats::default());
    let buffer = BufferConfig {
        stall_timeout_ms: 100,
        ..config(8, WhenFull::Block)
    };
    let (tx, rx) = spooled_queue(dir.path(), buffer, &stats);
    // Nobody takes: the first two fit, the rest spill at once (never blocking this thread).
    for t in 0..4 {
        tx.send_blocking(cuda(4, t));
    }
    tx.wait_until_written();
    assert_eq!(stats.spooled.get(EventKind::Cuda), 8);
    assert!(stats.healthy(), "not yet past the stall timeout");
    std::thread::sleep(Duration::from_millis(150));
    tx.send_blocking(cuda(4, 9));
    tx.wait_until_written();
    assert!(
        !stats.healthy(),
        "stalled: events waiting, nothing taken or acknowledged"
    );
    assert_eq!(stats.errors().get("stalled"), Some(&4));
    assert_eq!(stats.spooled.get(EventKind::Cuda), 12);
    assert_eq!(stats.dropped_total(EventKind::Cuda), 0);
    let mut rx = rx;
    let b = block_on(rx.recv()).unwrap();
    acknowledge(&rx, &stats, &b);
    assert!(stats.healthy(), "an acknowledgement ends the stall");
    drop(tx);
}

/// A spool of 1 byte: no batch fits.
fn no_room() -> crate::SpoolConfig {
    crate::SpoolConfig {
        max_size: 1,
        ..crate::SpoolConfig::default()
    }
}

#[test]
fn block_waits_only_when_memory_and_spool_are_both_full() {
    let dir = tempfile::tempdir().unwrap();
    let stats = Arc::new(SinkStats::default());
    let (tx, mut rx) = queue_with_spool(dir.path(), config(4, WhenFull::Block), no_room(), &stats);
    tx.send_blocking(cuda(4, 1)); // memory now full; the spool takes nothing (1 byte)
    let producer = std::thread::spawn(move || {
        tx.send_blocking(cuda(4, 2)); // waits for room
    });
    std::thread::sleep(Duration::from_millis(200));
    assert!(!producer.is_finished(), "block waits when both are full");
    let tags: Vec<u32> = block_on(async {
        let mut v = vec![];
        while let Some(b) = rx.recv().await {
            v.push(tag(&b));
            acknowledge(&rx, &stats, &b);
        }
        v
    });
    producer.join().unwrap();
    assert_eq!(tags, vec![1, 2]);
    assert_eq!(stats.dropped_total(EventKind::Cuda), 0);
}

#[test]
fn a_full_spool_drops_driver_batches_as_it_drops_cuda_ones() {
    for when_full in [WhenFull::DropNewest, WhenFull::DropOldest] {
        let dir = tempfile::tempdir().unwrap();
        let stats = Arc::new(SinkStats::default());
        let (tx, _rx) = queue_with_spool(dir.path(), config(4, when_full), no_room(), &stats);
        tx.send_blocking(cuda(4, 1)); // memory now full; the spool takes nothing (1 byte)
        tx.send_blocking(driver_batch(3));
        tx.wait_until_written();
        assert_eq!(
            stats.dropped(DropReason::SpoolFull, EventKind::Driver),
            3,
            "{when_full:?}"
        );
        assert_eq!(stats.spooled.get(EventKind::Driver), 0);
        assert_eq!(segments(dir.path()), 0, "the spool stays within max_size");
    }
}

#[test]
fn drop_oldest_evicts_spooled_driver_segments_for_room() {
    let dir = tempfile::tempdir().unwrap();
    let mut spool = crate::Spool::open(dir.path(), crate::SpoolConfig::default()).unwrap();
    let one = spool.store(&driver_batch(5)).unwrap();
    drop(spool);
    // Room is checked against the batch's memory size: one more would not fit beside the old.
    let memory = driver_batch(5).records.get_array_memory_size() as u64;
    let spool_config = crate::SpoolConfig {
        max_size: one + memory - 1,
        ..crate::SpoolConfig::default()
    };
    let stats = Arc::new(SinkStats::default());
    let (tx, _rx) = queue_with_spool(
        dir.path(),
        config(4, WhenFull::DropOldest),
        spool_config,
        &stats,
    );
    tx.send_blocking(driver_batch(5)); // behind the backlog: the old segment makes room
    tx.wait_until_written();
    assert_eq!(stats.dropped(DropReason::SpoolFull, EventKind::Driver), 5);
    assert_eq!(stats.spooled.get(EventKind::Driver), 5 + 5);
    assert_eq!(segments(dir.path()), 1);
}

#[test]
fn corrupt_segments_found_at_start_are_counted_as_received_and_dropped() {
    let dir = tempfile::tempdir().unwrap();
    {
        let stats = Arc::new(SinkStats::default());
        let (tx, mut rx) = spooled_queue(dir.path(), config(100, WhenFull::Block), &stats);
        tx.send_blocking(cuda(5, 1));
        drop(tx);
        block_on(async {
            let b = rx.recv().await.unwrap();
            rx.reject(b);
        });
        // Leave it spooled: a shutdown past its deadline.
        let mut state = rx.shared.lock();
        rx.spool_the_rest(&mut state);
    }
    let seg = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "seg"))
        .unwrap();
    let data = std::fs::read(&seg).unwrap();
    std::fs::write(&seg, &data[..data.len() - 10]).unwrap(); // truncated
    std::fs::write(dir.path().join("00000000000000ff.seg"), b"").unwrap(); // empty
    let stats = Arc::new(SinkStats::default());
    let (_tx, _rx) = spooled_queue(dir.path(), config(100, WhenFull::Block), &stats);
    // The truncated segment's header says 5; the empty one's loss is unknowable: at least 1.
    assert_eq!(
        stats.dropped(DropReason::SpoolCorrupt, EventKind::Cuda),
        5 + 1
    );
    assert_eq!(stats.corrupt_segments(), 2);
    assert_eq!(stats.received.get(EventKind::Cuda), 5 + 1);
    assert_eq!(stats.in_flight(EventKind::Cuda), 0);
}

/// A queue of 100 events under `block`, with the default spool at `dir`, that gives its sink
/// `shutdown_timeout` to deliver at the end.
fn deadline_queue(
    dir: &std::path::Path,
    shutdown_timeout: Duration,
    stats: &Arc<SinkStats>,
) -> (QueueSender, QueueReceiver) {
    let options = QueueOptions {
        name: "t".into(),
        buffer: config(100, WhenFull::Block),
        spool: Some(crate::Spool::open(dir, crate::SpoolConfig::default()).unwrap()),
        shutdown_timeout,
    };
    queue_with(options, stats.clone())
}

#[test]
fn at_the_shutdown_deadline_undelivered_batches_are_spooled_for_the_next_run() {
    let dir = tempfile::tempdir().unwrap();
    {
        let stats = Arc::new(SinkStats::default());
        let (tx, mut rx) = deadline_queue(dir.path(), Duration::from_millis(300), &stats);
        tx.send_blocking(cuda(3, 1));
        tx.send_blocking(xid());
        drop(tx);
        // The destination keeps failing: every batch comes back.
        block_on(async {
            while let Some(b) = rx.recv().await {
                rx.reject(b);
            }
        });
        assert_eq!(stats.spool_pending(EventKind::Cuda), 3);
        assert_eq!(stats.spool_pending(EventKind::Xid), 1);
        assert_eq!(stats.in_flight(EventKind::Cuda), 0);
    }
    // Next run: the spooled rows are offered first.
    let stats = Arc::new(SinkStats::default());
    let (tx, mut rx) = deadline_queue(dir.path(), Duration::from_secs(5), &stats);
    assert_eq!(stats.received.get(EventKind::Cuda), 3);
    drop(tx);
    let got: Vec<EventKind> = block_on(async {
        let mut v = vec![];
        while let Some(b) = rx.recv().await {
            v.push(b.kind);
            acknowledge(&rx, &stats, &b);
        }
        v
    });
    assert_eq!(got.len(), 2);
    assert!(got.contains(&EventKind::Xid) && got.contains(&EventKind::Cuda));
}
