//! Tests of the sink queue's policies and accounting.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::test_helpers::{block_on, config};
use super::*;
use crate::stats::DropReason;
use crate::test_support::{cuda_batch as cuda, result_tag as tag, xid_batch as xid};

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
fn repeated_spool_warnings_are_rate_limited_and_counted() {
    let stats = Arc::new(SinkStats::default());
    let (_tx, rx) = queue(config(10, WhenFull::Block), stats);
    let shared = &rx.shared;
    for _ in 0..5 {
        shared.warn_limited(
            &shared.spool_warning,
            "cannot spool; events dropped",
            &"disk full",
        );
    }
    let limit = shared.spool_warning.lock().unwrap();
    assert!(limit.last.is_some(), "the first one is logged");
    assert_eq!(
        limit.suppressed, 4,
        "the next four within the interval are held back"
    );
}

#[test]
fn retry_delays_double_with_jitter_and_stay_within_bounds() {
    let delays: Vec<Duration> = retry_delays().take(12).collect();
    assert!(delays[0] >= BACKOFF_FIRST && delays[0] < BACKOFF_FIRST * 2);
    assert!(delays[1] >= BACKOFF_FIRST * 2, "{delays:?}");
    for delay in &delays[7..] {
        // The base reached the maximum; the receiver caps the jitter there.
        assert!(delay.min(&BACKOFF_MAX) == &BACKOFF_MAX, "{delays:?}");
    }
    let series: Vec<Vec<Duration>> = (0..4).map(|_| retry_delays().take(3).collect()).collect();
    assert!(
        series.windows(2).any(|w| w[0] != w[1]),
        "jitter makes series differ: {series:?}"
    );
}
