//! Tests of the spill lane: a stalled spool disk (the writer thread held before each write)
//! never blocks the producer until the lane is full, the policies apply to a full lane, order
//! is kept between memory, lane and spool, and the lane reaches the disk at shutdown.

use std::sync::mpsc;
use std::time::Duration;

use super::*;
use crate::stats::DropReason;
use crate::test_support::{cuda_batch as cuda, result_tag as tag};

fn config(max_events: usize, when_full: WhenFull) -> BufferConfig {
    BufferConfig {
        max_events,
        max_bytes: usize::MAX,
        when_full,
        ..BufferConfig::default()
    }
}

fn spooled_queue(
    dir: &std::path::Path,
    buffer: BufferConfig,
    write_buffer: u64,
    stats: &Arc<SinkStats>,
) -> (QueueSender, QueueReceiver) {
    let spool_config = crate::SpoolConfig {
        write_buffer,
        ..crate::SpoolConfig::default()
    };
    let options = QueueOptions {
        name: "t".into(),
        buffer,
        spool: Some(crate::Spool::open(dir, spool_config).unwrap()),
        shutdown_timeout: Duration::from_secs(30),
    };
    queue_with(options, stats.clone())
}

fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(future)
}

fn segments(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "seg"))
        .count()
}

/// Sends `batch` on another thread; the receiver of the result says when the send returned.
fn send_in_thread(tx: &QueueSender, batch: EventBatch) -> mpsc::Receiver<()> {
    let (done, returned) = mpsc::channel();
    let tx = tx.clone();
    std::thread::spawn(move || {
        tx.send_blocking(batch);
        let _ = done.send(());
    });
    returned
}

/// Waits until the writer thread holds a batch (it is then stuck at the gate).
fn wait_until_writing(tx: &QueueSender) {
    for _ in 0..1000 {
        if tx.shared.lock().writing.is_some() {
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    panic!("the writer thread never took a batch");
}

#[test]
fn a_stalled_spool_disk_never_blocks_the_producer_and_order_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let stats = Arc::new(SinkStats::default());
    let (tx, mut rx) = spooled_queue(dir.path(), config(4, WhenFull::Block), 32 << 20, &stats);
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
    let (tx, _rx) = spooled_queue(dir.path(), config(4, WhenFull::DropNewest), 1, &stats);
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
    let (tx, _rx) = spooled_queue(dir.path(), config(4, WhenFull::Block), 1, &stats);
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
        let (tx, rx) = spooled_queue(dir.path(), config(4, WhenFull::Block), 32 << 20, &stats);
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
    let (_tx, mut rx) = spooled_queue(dir.path(), config(4, WhenFull::Block), 32 << 20, &stats);
    let tags: Vec<u32> = (0..5)
        .map(|_| tag(&block_on(rx.recv()).expect("a replayed batch")))
        .collect();
    assert_eq!(tags, vec![1, 2, 3, 4, 5]);
    assert_eq!(stats.replayed.get(EventKind::Cuda), 20);
}

#[test]
fn a_full_spool_disk_counts_every_batch_it_cannot_write_and_keeps_the_rest_whole() {
    let Some(disk) = crate::small_disk::SmallDisk::mount("64k") else {
        panic!("mounting a tmpfs needs root, as the tests run in CI");
    };
    let dir = disk.path().join("spool");
    let stats = Arc::new(SinkStats::default());
    let (tx, _rx) = spooled_queue(&dir, config(4, WhenFull::Block), 32 << 20, &stats);
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

/// A spool that holds one `cuda(4, _)` segment and has no room for a second batch.
fn one_segment_spool() -> crate::SpoolConfig {
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
    assert!(tx.shared.lock().journal.is_none());
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
        assert!(state.spilling.is_empty());
        drop(state);
        assert_eq!(stats.spooled.get(EventKind::Cuda), 20);
        assert_eq!(stats.in_flight(EventKind::Cuda), 0);
        assert_eq!(stats.dropped_total(EventKind::Cuda), 0);
    }
    let stats = Arc::new(SinkStats::default());
    let (_tx, mut rx) = spooled_queue(dir.path(), config(4, WhenFull::Block), 32 << 20, &stats);
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
    let (tx, rx) = spooled_queue(dir.path(), config(4, WhenFull::Block), 32 << 20, &stats);
    let gate = tx.shared.writer_gate.lock().unwrap();
    tx.send_blocking(cuda(4, 0)); // memory
    tx.send_blocking(cuda(4, 1)); // taken by the writer, stuck at the gate
    wait_until_writing(&tx);
    let sink_end = std::thread::spawn(move || drop(rx));
    for _ in 0..2000 {
        if !tx.shared.lock().receiver_alive {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    // The end waits for the stuck write; a batch sent meanwhile is refused at once, counted,
    // and never joins the lane it would have to wait behind.
    tx.send_blocking(cuda(4, 2));
    assert_eq!(stats.dropped(DropReason::SinkStopped, EventKind::Cuda), 4);
    assert!(tx.shared.lock().spilling.is_empty());
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
