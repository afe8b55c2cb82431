//! What the queue's tests share: configurations, queues with a spool, a runtime to await
//! the receiver on, and ways to watch the spool's writer thread.

use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use super::{queue_with, BufferConfig, QueueOptions, QueueReceiver, QueueSender, WhenFull};
use crate::stats::SinkStats;
use crate::test_support::cuda_batch as cuda;
use crate::EventBatch;

/// A memory queue of `max_events` events (bytes unbounded) under `when_full`.
pub(super) fn config(max_events: usize, when_full: WhenFull) -> BufferConfig {
    BufferConfig {
        max_events,
        max_bytes: usize::MAX,
        when_full,
        ..BufferConfig::default()
    }
}

pub(super) fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(future)
}

/// Segment files under `dir`, the XID journal's included.
pub(super) fn segments(dir: &std::path::Path) -> usize {
    let mut count = 0;
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            count += segments(&path);
        } else if path.extension().is_some_and(|e| e == "seg") {
            count += 1;
        }
    }
    count
}

/// A queue named `t` with a spool at `dir` configured by `spool`.
pub(super) fn queue_with_spool(
    dir: &std::path::Path,
    buffer: BufferConfig,
    spool: crate::SpoolConfig,
    stats: &Arc<SinkStats>,
) -> (QueueSender, QueueReceiver) {
    let options = QueueOptions {
        name: "t".into(),
        buffer,
        spool: Some(crate::Spool::open(dir, spool).unwrap()),
        shutdown_timeout: Duration::from_secs(30),
    };
    queue_with(options, stats.clone())
}

/// A queue with the default spool at `dir`.
pub(super) fn spooled_queue(
    dir: &std::path::Path,
    buffer: BufferConfig,
    stats: &Arc<SinkStats>,
) -> (QueueSender, QueueReceiver) {
    queue_with_spool(dir, buffer, crate::SpoolConfig::default(), stats)
}

/// A queue whose spill lane holds `write_buffer` bytes.
pub(super) fn lane_queue(
    dir: &std::path::Path,
    buffer: BufferConfig,
    write_buffer: u64,
    stats: &Arc<SinkStats>,
) -> (QueueSender, QueueReceiver) {
    let spool = crate::SpoolConfig {
        write_buffer,
        ..crate::SpoolConfig::default()
    };
    queue_with_spool(dir, buffer, spool, stats)
}

/// A spool that holds one `cuda(4, _)` segment and has no room for a second batch.
pub(super) fn one_segment_spool() -> crate::SpoolConfig {
    let scratch = tempfile::tempdir().unwrap();
    let mut spool = crate::Spool::open(scratch.path(), crate::SpoolConfig::default()).unwrap();
    let one = spool.store(&cuda(4, 0)).unwrap();
    // Room is checked against a batch's memory size: one more does not fit beside it.
    let memory = cuda(4, 0).records.get_array_memory_size() as u64;
    crate::SpoolConfig {
        max_size: one + memory - 1,
        ..crate::SpoolConfig::default()
    }
}

/// What a sink does after its destination acknowledged `batch`.
pub(super) fn acknowledge(rx: &QueueReceiver, stats: &SinkStats, batch: &EventBatch) {
    stats.delivered.add(batch.kind, batch.len() as u64);
    rx.delivered();
}

/// Sends `batch` on another thread; the receiver of the result says when the send returned.
pub(super) fn send_in_thread(tx: &QueueSender, batch: EventBatch) -> mpsc::Receiver<()> {
    let (done, returned) = mpsc::channel();
    let tx = tx.clone();
    std::thread::spawn(move || {
        tx.send_blocking(batch);
        let _ = done.send(());
    });
    returned
}

/// Waits until the writer thread holds a batch (it is then stuck at the gate).
pub(super) fn wait_until_writing(tx: &QueueSender) {
    for _ in 0..1000 {
        if tx.shared.lock().disk.is_writing() {
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    panic!("the writer thread never took a batch");
}
