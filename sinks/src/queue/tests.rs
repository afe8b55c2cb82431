//! Tests of the sink queue's policies and accounting.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::*;
use crate::test_support::{cuda_batch as cuda, result_tag as tag, xid_batch as xid};

fn config(max_events: usize, when_full: WhenFull) -> BufferConfig {
    BufferConfig {
        max_events,
        max_bytes: usize::MAX,
        when_full,
    }
}

fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(future)
}

#[test]
fn drop_newest_keeps_the_queued_batches_and_counts_the_rest() {
    let stats = Arc::new(SinkStats::default());
    let (tx, mut rx) = queue(config(10, WhenFull::DropNewest), stats.clone());
    for t in 1..=4 {
        tx.send_blocking(cuda(4, t)); // 4 + 4 fit in 10; the third and fourth do not
    }
    assert_eq!(stats.dropped(DropReason::BufferFull, EventKind::Cuda), 8);
    assert_eq!(stats.queued_events.load(Ordering::Relaxed), 8);
    drop(tx);
    let tags: Vec<u32> = block_on(async {
        let mut v = vec![];
        while let Some(b) = rx.recv().await {
            v.push(tag(&b))
        }
        v
    });
    assert_eq!(tags, vec![1, 2]);
    assert_eq!(stats.received.get(EventKind::Cuda), 16);
    assert_eq!(
        stats.in_flight(EventKind::Cuda),
        8,
        "received - dropped, not yet delivered"
    );
}

#[test]
fn drop_oldest_evicts_queued_batches_for_new_ones() {
    let stats = Arc::new(SinkStats::default());
    let (tx, mut rx) = queue(config(10, WhenFull::DropOldest), stats.clone());
    for t in 1..=4 {
        tx.send_blocking(cuda(4, t));
    }
    drop(tx);
    let tags: Vec<u32> = block_on(async {
        let mut v = vec![];
        while let Some(b) = rx.recv().await {
            v.push(tag(&b))
        }
        v
    });
    assert_eq!(tags, vec![3, 4]);
    assert_eq!(stats.dropped(DropReason::BufferFull, EventKind::Cuda), 8);
}

#[test]
fn xids_are_never_dropped_and_jump_the_queue() {
    let stats = Arc::new(SinkStats::default());
    let (tx, mut rx) = queue(config(4, WhenFull::DropNewest), stats.clone());
    tx.send_blocking(cuda(4, 1));
    tx.send_blocking(xid());
    tx.send_blocking(xid());
    drop(tx);
    let kinds: Vec<EventKind> = block_on(async {
        let mut v = vec![];
        while let Some(b) = rx.recv().await {
            v.push(b.kind)
        }
        v
    });
    assert_eq!(kinds, vec![EventKind::Xid, EventKind::Xid, EventKind::Cuda]);
    assert_eq!(stats.dropped_total(EventKind::Xid), 0);
}

#[test]
fn block_waits_for_room_and_loses_nothing() {
    let stats = Arc::new(SinkStats::default());
    let (tx, mut rx) = queue(config(8, WhenFull::Block), stats.clone());
    let producer = std::thread::spawn(move || {
        for t in 0..50 {
            tx.send_blocking(cuda(4, t));
        }
    });
    let tags: Vec<u32> = block_on(async {
        let mut v = vec![];
        while let Some(b) = rx.recv().await {
            v.push(tag(&b));
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
        v
    });
    producer.join().unwrap();
    assert_eq!(tags, (0..50).collect::<Vec<_>>());
    assert_eq!(stats.dropped_total(EventKind::Cuda), 0);
}

#[test]
fn a_stopped_sink_counts_queued_and_later_batches_as_dropped() {
    let stats = Arc::new(SinkStats::default());
    let (tx, rx) = queue(config(100, WhenFull::Block), stats.clone());
    tx.send_blocking(cuda(3, 1));
    drop(rx);
    tx.send_blocking(cuda(2, 2));
    tx.send_blocking(xid());
    assert_eq!(stats.dropped(DropReason::SinkStopped, EventKind::Cuda), 5);
    assert_eq!(stats.dropped(DropReason::SinkStopped, EventKind::Xid), 1);
    assert_eq!(stats.in_flight(EventKind::Cuda), 0);
}

#[test]
fn a_failing_sink_spills_to_the_spool_and_replays_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let stats = Arc::new(SinkStats::default());
    let spool = crate::Spool::open(dir.path(), crate::SpoolConfig::default()).unwrap();
    let options = QueueOptions {
        name: "t".into(),
        buffer: config(8, WhenFull::Block),
        spool: Some(spool),
        shutdown_timeout: Duration::from_secs(30),
    };
    let (tx, mut rx) = queue_with(options, stats.clone());
    tx.send_blocking(cuda(4, 1));
    let first = block_on(rx.recv()).unwrap();
    rx.reject(first); // the destination failed: batch 1 goes back, the sink is unhealthy
    tx.send_blocking(cuda(4, 2)); // fits in memory
    tx.send_blocking(cuda(4, 3)); // memory full, sink failing: spooled, not blocked
    tx.send_blocking(xid()); // behind a spool backlog: spooled too
    tx.send_blocking(cuda(4, 4)); // still behind the backlog
    assert_eq!(stats.spooled.get(EventKind::Cuda), 8);
    assert_eq!(stats.spool_pending(EventKind::Xid), 1);
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
            rx.delivered();
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
            (EventKind::Cuda, 1),
            (EventKind::Cuda, 2),
            (EventKind::Cuda, 3),
            (EventKind::Xid, 0),
            (EventKind::Cuda, 4)
        ]
    );
    assert_eq!(stats.replayed.get(EventKind::Cuda), 8);
    assert_eq!(stats.spool_pending(EventKind::Cuda), 0);
    assert_eq!(stats.dropped_total(EventKind::Cuda), 0);
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn at_the_shutdown_deadline_undelivered_batches_are_spooled_for_the_next_run() {
    let dir = tempfile::tempdir().unwrap();
    {
        let stats = Arc::new(SinkStats::default());
        let spool = crate::Spool::open(dir.path(), crate::SpoolConfig::default()).unwrap();
        let options = QueueOptions {
            name: "t".into(),
            buffer: config(100, WhenFull::Block),
            spool: Some(spool),
            shutdown_timeout: Duration::from_millis(300),
        };
        let (tx, mut rx) = queue_with(options, stats.clone());
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
    let spool = crate::Spool::open(dir.path(), crate::SpoolConfig::default()).unwrap();
    let options = QueueOptions {
        name: "t".into(),
        buffer: config(100, WhenFull::Block),
        spool: Some(spool),
        shutdown_timeout: Duration::from_secs(5),
    };
    let (tx, mut rx) = queue_with(options, stats.clone());
    assert_eq!(stats.received.get(EventKind::Cuda), 3);
    drop(tx);
    let got: Vec<EventKind> = block_on(async {
        let mut v = vec![];
        while let Some(b) = rx.recv().await {
            v.push(b.kind);
            rx.delivered();
        }
        v
    });
    assert_eq!(got.len(), 2);
    assert!(got.contains(&EventKind::Xid) && got.contains(&EventKind::Cuda));
}
