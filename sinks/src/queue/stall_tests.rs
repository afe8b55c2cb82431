//! Tests of what "stalled" means: an acknowledgement that is overdue (work waiting that the
//! sink does not take, or an XID unsettled past what the sink holds XIDs for), never rows a
//! sink keeps on purpose, and never a batch that arrives after a quiet spell.

use std::time::{Duration, Instant};

use super::test_helpers::{acknowledge, block_on, config};
use super::*;
use crate::test_support::{cuda_batch as cuda, xid_batch as xid};

/// A memory queue whose stall timeout is 100 ms.
fn quick_stall() -> (QueueSender, QueueReceiver, Arc<SinkStats>) {
    let stats = Arc::new(SinkStats::default());
    let buffer = BufferConfig {
        stall_timeout_ms: 100,
        ..config(1000, WhenFull::Block)
    };
    let (tx, rx) = queue(buffer, stats.clone());
    (tx, rx, stats)
}

/// Runs the stall check now, as the receiver's and the senders' paths do.
fn check(rx: &QueueReceiver) -> bool {
    let shared = &*rx.shared;
    let mut state = shared.lock();
    shared.check_stall(&mut state, Instant::now())
}

#[test]
fn a_batch_after_a_quiet_spell_taken_at_once_is_no_stall() {
    let (tx, mut rx, stats) = quick_stall();
    tx.send_blocking(cuda(4, 1));
    block_on(rx.recv()).unwrap(); // held, as rows in an open Parquet file are
    for round in 0..3 {
        // Quiet for three stall timeouts, then ordinary activity.
        std::thread::sleep(Duration::from_millis(300));
        tx.send_blocking(cuda(4, round));
        assert!(stats.healthy(), "round {round}: sent after a quiet spell");
        block_on(rx.recv()).unwrap();
        assert!(!check(&rx));
        assert!(stats.healthy(), "round {round}: taken at once");
    }
    assert_eq!(stats.errors().get("stalled"), None);
}

#[test]
fn rows_held_unacknowledged_for_long_are_no_stall() {
    let (tx, mut rx, stats) = quick_stall();
    for t in 0..20 {
        tx.send_blocking(cuda(4, t));
        block_on(rx.recv()).unwrap();
        std::thread::sleep(Duration::from_millis(25));
    }
    // 500 ms, five stall timeouts, without one acknowledgement.
    assert!(!check(&rx));
    assert!(stats.healthy());
}

#[test]
fn work_the_sink_does_not_take_is_a_stall_that_ends_when_it_takes_again() {
    let (tx, mut rx, stats) = quick_stall();
    tx.send_blocking(cuda(4, 1));
    std::thread::sleep(Duration::from_millis(50));
    assert!(!check(&rx), "waiting, within the timeout");
    std::thread::sleep(Duration::from_millis(80));
    assert!(check(&rx), "waiting 130 ms: the sink is blocked");
    assert!(!stats.healthy());
    // The blocked write returns and the sink takes again: no acknowledgement needed.
    block_on(rx.recv()).unwrap();
    assert!(!check(&rx));
    assert!(stats.healthy());
}

#[test]
fn an_acknowledgement_keeps_a_sink_that_takes_slowly_from_stalling() {
    let (tx, _rx, stats) = quick_stall();
    tx.send_blocking(cuda(4, 1));
    // A sink that stopped taking (too many in flight) but is acknowledged meanwhile.
    for _ in 0..4 {
        std::thread::sleep(Duration::from_millis(60));
        acknowledge(&_rx, &stats, &cuda(0, 0));
        assert!(!check(&_rx));
    }
    assert!(stats.healthy());
}

#[test]
fn an_xid_unsettled_past_the_timeout_is_a_stall() {
    let (tx, mut rx, stats) = quick_stall();
    tx.send_blocking(xid());
    let batch = block_on(rx.recv()).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    assert!(!check(&rx));
    std::thread::sleep(Duration::from_millis(80));
    assert!(check(&rx), "an XID request unanswered for 130 ms");
    assert!(!stats.healthy());
    acknowledge(&rx, &stats, &batch);
    assert!(!check(&rx));
    assert!(stats.healthy());
}

#[test]
fn an_xid_held_on_purpose_is_overdue_only_past_its_hold_and_the_timeout() {
    let (tx, mut rx, stats) = quick_stall();
    rx.holds_xids_for(Duration::from_millis(300));
    tx.send_blocking(xid());
    let batch = block_on(rx.recv()).unwrap();
    std::thread::sleep(Duration::from_millis(330));
    assert!(!check(&rx), "in its file, within hold + timeout (400 ms)");
    assert!(stats.healthy());
    std::thread::sleep(Duration::from_millis(100));
    assert!(check(&rx), "430 ms: the file should have closed by now");
    acknowledge(&rx, &stats, &batch);
    assert!(!check(&rx));
    assert!(stats.healthy());
}

#[test]
fn a_failing_sink_stays_unhealthy_when_a_stall_ends() {
    let (tx, mut rx, stats) = quick_stall();
    tx.send_blocking(cuda(4, 1));
    let batch = block_on(rx.recv()).unwrap();
    rx.reject(batch); // the destination failed: back in memory, retried after a backoff
    std::thread::sleep(Duration::from_millis(130));
    assert!(check(&rx));
    // Clearing the stall must not hide the failure.
    rx.shared.lock().handoff.progress(Instant::now());
    assert!(!check(&rx));
    assert!(!stats.healthy(), "still failing until a delivery");
}
