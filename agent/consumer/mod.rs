//! The consumer thread: loads every registered ring source, drains their rings and hands each
//! record to the source that owns its ring, without knowing which source it is.
//!
//! The XID ring wakes this thread at every record; the CUDA ring does not (see
//! `bpf/cuda.bpf.c`) and is drained every `drain_interval_ms` or when it fills past its
//! threshold. At stop the programs are detached first, then the rings are drained to the last
//! record, so that what the kernel emitted and what the agent received can be compared exactly.
//! `priority` gives this thread the CPU it needs when the traced processes keep every CPU busy.
//! `ring_reader` maps and walks the rings (not libbpf's reader, which gives the space back after
//! every record), and `prefetch` asks for a record's successors before it is decoded.

mod prefetch;
pub mod priority;
mod ring_reader;

use std::cell::RefCell;
use std::mem::MaybeUninit;
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use libbpf_rs::{MapHandle, OpenObject};

use self::ring_reader::{RingReader, RingReaderBuilder};
use crate::accounting::Accounting;
use crate::sources::{self, RingMaps, RunningRing, SourceSetup, SourceStatus};
use crate::summary::RunSummary;

/// How long a program that was running on another CPU while we detached may take to finish.
const DETACH_GRACE: Duration = Duration::from_millis(20);

/// Sent once the programs are attached (or known not to be).
pub struct Ready {
    /// Each ring source's status (or each of its hooks'), in registration order.
    pub sources: Vec<SourceStatus>,
    /// The traced-process map, when CUDA probes record selected processes only.
    pub traced_tgids: Option<MapHandle>,
}

/// Starts the consumer thread. The receiver yields one [`Ready`] (or the fatal error).
pub fn spawn(setup: SourceSetup) -> (JoinHandle<()>, mpsc::Receiver<anyhow::Result<Ready>>) {
    let (ready_tx, ready_rx) = mpsc::channel();
    priority::raise_sink_library_threads();
    let handle = std::thread::Builder::new()
        .name("gpuship-consumer".into())
        .spawn(move || {
            priority::raise_consumer();
            if let Err(err) = run(&setup, &ready_tx) {
                tracing::error!(error = format!("{err:#}"), "consumer failed");
                let _ = ready_tx.send(Err(err));
            }
        })
        .expect("spawning the consumer thread");
    (handle, ready_rx)
}

/// An attached source, borrowed by its rings' callbacks.
type Running<'obj> = RefCell<Box<dyn RunningRing + 'obj>>;

fn run(setup: &SourceSetup, ready: &mpsc::Sender<anyhow::Result<Ready>>) -> anyhow::Result<()> {
    let registered: Vec<_> = sources::ring_sources().collect();
    // One object per source, allocated up front: the loaded programs borrow them.
    let mut storage: Vec<MaybeUninit<OpenObject>> =
        registered.iter().map(|_| MaybeUninit::uninit()).collect();
    let mut statuses = Vec::new();
    let mut running: Vec<Running<'_>> = Vec::new();
    for (source, storage) in registered.iter().zip(storage.iter_mut()) {
        let loaded = source.load(storage, setup);
        statuses.extend(loaded.statuses);
        running.extend(loaded.running.map(RefCell::new));
    }
    for status in statuses.iter().filter(|s| !s.attached) {
        tracing::warn!(source = status.source, reason = %status.detail, "source not attached; carrying on without it");
    }
    let rings = rings_of(&running)?;
    let reader = build_reader(&running, &rings, &setup.accounting)?;
    let mut traced_tgids = None;
    for source in &running {
        traced_tgids = traced_tgids.or(source.borrow().traced_processes()?);
    }
    let _ = ready.send(Ok(Ready {
        sources: statuses,
        traced_tgids,
    }));
    let Some(mut reader) = reader else {
        return Ok(());
    };
    // Kernel counters are read live by every snapshot (see Accounting::attach_kernel_counters).
    for (_, maps) in rings {
        setup
            .accounting
            .attach_kernel_counters(maps.ring, maps.kernel_counters);
    }
    let drain_interval = Duration::from_millis(setup.sources.cuda.drain_interval_ms);
    let mut errors = PassErrors::default();
    poll_until_stop(&mut reader, &running, setup, drain_interval, &mut errors);
    drain(&mut reader, &running, &mut errors);
    drop(reader);
    finish(&running, setup);
    tracing::info!("consumer drained all rings");
    Ok(())
}

/// Every ring of every running source, with the index of its source.
fn rings_of(running: &[Running<'_>]) -> anyhow::Result<Vec<(usize, RingMaps)>> {
    let mut rings = Vec::new();
    for (index, source) in running.iter().enumerate() {
        rings.extend(
            source
                .borrow()
                .rings()?
                .into_iter()
                .map(|maps| (index, maps)),
        );
    }
    Ok(rings)
}

/// One reader over every ring; each record is counted as received, handed to its source, and
/// counted again when the source rejects it. `None` when no source runs.
fn build_reader<'cb>(
    running: &'cb [Running<'_>],
    rings: &[(usize, RingMaps)],
    accounting: &'cb Accounting,
) -> anyhow::Result<Option<RingReader<'cb>>> {
    if rings.is_empty() {
        return Ok(None);
    }
    let mut builder = RingReaderBuilder::default();
    for (index, maps) in rings {
        let (source, ring) = (&running[*index], maps.ring);
        let counters = accounting.ring(ring);
        builder.add(&maps.records, move |raw: &[u8]| {
            prefetch::records_after(raw);
            counters.received.fetch_add(1, Ordering::Relaxed);
            if source.borrow_mut().on_record(ring, raw).is_err() {
                counters.decode_errors.fetch_add(1, Ordering::Relaxed);
            }
        })?;
    }
    Ok(Some(builder.build()?))
}

/// Logs the first failed pass over the rings (a ring the kernel should never write wrongly),
/// not every one of the passes after it.
#[derive(Default)]
struct PassErrors {
    logged: bool,
}

impl PassErrors {
    fn check(&mut self, pass: anyhow::Result<()>) {
        if let Err(err) = pass {
            if !std::mem::replace(&mut self.logged, true) {
                tracing::error!(
                    error = format!("{err:#}"),
                    "reading a ring failed; later failures are not logged"
                );
            }
        }
    }
}

/// Drains and flushes until the stop flag is set.
fn poll_until_stop(
    reader: &mut RingReader<'_>,
    running: &[Running<'_>],
    setup: &SourceSetup,
    drain_interval: Duration,
    errors: &mut PassErrors,
) {
    while !setup.stop.load(Ordering::Acquire) {
        errors.check(reader.poll(drain_interval));
        flush(running, false);
    }
}

/// Detaches every program, then takes every record left and flushes everything.
fn drain(reader: &mut RingReader<'_>, running: &[Running<'_>], errors: &mut PassErrors) {
    for source in running {
        source.borrow().detach();
    }
    // A program that was running on another CPU while we detached finishes within
    // microseconds; give it that, then take everything that is left.
    std::thread::sleep(DETACH_GRACE);
    errors.check(reader.consume());
    flush(running, true);
}

fn flush(running: &[Running<'_>], all: bool) {
    let now = Instant::now();
    for source in running {
        source.borrow_mut().flush(now, all);
    }
}

/// Adds each source's totals to the run summary.
fn finish(running: &[Running<'_>], setup: &SourceSetup) {
    let mut summary = RunSummary::default();
    for source in running {
        source.borrow_mut().finish(&mut summary);
    }
    if let Ok(mut shared) = setup.summary.lock() {
        shared.merge(summary);
    }
}
