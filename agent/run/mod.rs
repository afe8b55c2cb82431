//! `gpuship run`: starts sinks, sources and the consumer, waits for the end (signal, traced
//! command exit, traced pid exit), then drains in order: stop probes, drain rings, flush
//! batches, close sinks, and report the final accounting.

mod command;
mod ledger;
mod privileges;
mod progress;
mod sinks;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use gpuship_sinks::limits::nanos_i64;
use gpuship_sinks::{queue_with, QueueOptions, SinkInput, SinkStats, Spool, SpoolConfig};

use crate::accounting::{Accounting, Snapshot};
use crate::capture::CaptureContext;
use crate::config::Config;
use crate::consumer::{self, ConsumerSettings, SourceStatus};
use crate::enrich::{driver_version, host_identity, machine_id, Clocks, GpuDirectory};
use crate::fanout::FanOut;
use crate::live::LiveTap;
use crate::metrics::{self, Health};
use crate::sources::cuda::probes::{trace_process, ProcessFilter};
use crate::sources::{kmsg, tracefs};
use crate::summary::RunSummary;
use crate::xid::attribution::Attributor;

use crate::xid::{XidStage, XidStageSettings};

pub use privileges::{can_trace, effective_capabilities};
pub use sinks::{build_sink, check_sinks, sink_names};

/// How long the final accounting document may take at shutdown (a stop must finish within
/// the service manager's limit: 60 s in deploy/).
const LEDGER_SHUTDOWN_LIMIT: Duration = Duration::from_secs(10);

/// What to trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// Every process (the daemon mode).
    AllProcesses,
    /// One running process; the run ends when it exits.
    Pid(u32),
    /// A command started by gpuship, with its descendants; the run ends when it exits.
    Command(Vec<String>),
}

/// Everything `gpuship run` needs.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Validated configuration.
    pub config: Config,
    /// What to trace.
    pub target: Target,
    /// Where to write the final accounting and summary as JSON.
    pub summary_json: Option<PathBuf>,
}

/// How the run ended.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RunOutcome {
    /// Status of each BPF source at start.
    pub sources: Vec<(String, bool, String)>,
    /// Final counters.
    pub accounting: Snapshot,
    /// Calls, bytes, failures, XIDs.
    pub summary: RunSummary,
    /// Exit code of the traced command.
    pub command_exit_code: Option<i32>,
}

/// Runs the agent until the end condition of `options.target`, then drains.
pub fn run(options: RunOptions) -> anyhow::Result<RunOutcome> {
    let config = &options.config;
    // A sink that cannot start is an error now, before anything is captured.
    for (name, entry) in sink_names(&config.sinks).iter().zip(&config.sinks) {
        sinks::check_start(&entry.sink)
            .map_err(|reason| anyhow!("sink {name} cannot start: {reason}"))?;
    }
    privileges::check(config.sources.xid.tracepoint || config.sources.cuda.enabled)?;
    // Held until the run returns; the kernel releases it however the process ends.
    let locks = crate::state_dir::lock(config)?;
    tracing::debug!(locked = ?locks.locked, "state directory and parquet roots locked");
    let identity = host_identity(config.agent.host_name.as_deref());
    let host_id = machine_id();
    let clocks = Clocks::measure();
    let gpus = Arc::new(GpuDirectory::load(&config.enrich.nvidia_proc_dir));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("gpuship-rt")
        // The sinks run here and must keep up with the consumer (see consumer::priority).
        .on_thread_start(consumer::priority::raise_sink_thread)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let signals = {
        let _runtime = runtime.enter();
        progress::StopSignals::install()
    };
    // Before any sink starts: a port in use is a start error, not a silent run without probes.
    let metrics_listener = metrics::bind(&config.metrics, &runtime)?;

    let mut fanout = FanOut::default();
    let mut accounting = Accounting::default();
    let mut sink_tasks = Vec::new();
    for (name, entry) in sink_names(&config.sinks).into_iter().zip(&config.sinks) {
        let sink = build_sink(&name, &entry.sink, &identity, host_id.as_deref());
        let stats = Arc::new(SinkStats::default());
        let spool = open_spool(&config.agent.state_dir, &name, &entry.options.spool);
        let options = QueueOptions {
            name: name.clone(),
            buffer: entry.options.buffer.clone(),
            spool,
            shutdown_timeout: Duration::from_secs(config.agent.shutdown_timeout_secs),
        };
        let (sender, batches) = queue_with(options, stats.clone());
        fanout.add(name.clone(), sender, stats.clone(), &entry.options);
        accounting.sinks.push((name.clone(), stats.clone()));
        let run = sink.run(SinkInput {
            batches,
            stats: stats.clone(),
        });
        let task = runtime.spawn(sinks::watched(name.clone(), stats, run));
        sink_tasks.push((name, task));
    }
    let accounting = Arc::new(accounting);
    let ledger = ledger::Ledger::for_sinks(
        &config.sinks,
        &identity.host,
        chrono::Utc::now(),
        runtime.handle(),
    );
    if let Some(ledger) = &ledger {
        tracing::info!(documents = ?ledger.locations(), "accounting documents kept beside the data");
        let period = Duration::from_secs(config.agent.stats_interval_secs.clamp(1, 60));
        runtime.spawn(ledger.clone().keep_written(accounting.clone(), period));
    }
    let health = Arc::new(Health::default());
    let live = Arc::new(LiveTap::new());
    if let Some(listener) = metrics_listener {
        let served = metrics::Served {
            accounting: accounting.clone(),
            health: health.clone(),
            live: live.clone(),
        };
        let limits = metrics::Limits::new(config.metrics.max_connections);
        runtime.spawn(metrics::serve(listener, served, limits));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let summary = Arc::new(Mutex::new(RunSummary::default()));

    let tracefs = if config.sources.xid.tracepoint {
        tracefs::ensure_mounted()
            .map_err(|reason| tracing::warn!(%reason, "no tracefs"))
            .ok()
    } else {
        None
    };
    let filter = match options.target {
        Target::AllProcesses => ProcessFilter::All,
        Target::Pid(_) | Target::Command(_) => ProcessFilter::Selected,
    };
    let xid_settings = &config.sources.xid;
    let xid_stage = XidStage::new(
        identity.clone(),
        XidStageSettings {
            reconcile_window: Duration::from_millis(xid_settings.reconcile_window_ms),
            incident_window: Duration::from_secs(xid_settings.incident_window_secs),
            attribution_window: Duration::from_secs(xid_settings.attribution_window_secs),
            driver_version: driver_version(&config.enrich.nvidia_proc_dir),
        },
        Attributor::new(
            &config.enrich.proc_dir,
            &config.enrich.dev_dir,
            &config.enrich.pod_log_dir,
            nanos_i64(Duration::from_secs(xid_settings.attribution_window_secs)),
        ),
        fanout.clone(),
        accounting.clone(),
        summary.clone(),
    );
    let xid_stage = Arc::new(xid_stage.with_live(live.clone()));
    let capture = CaptureContext {
        identity: identity.clone(),
        clocks,
        gpus,
        fanout,
        accounting: accounting.clone(),
        stop: stop.clone(),
        summary: summary.clone(),
        xid: xid_stage.clone(),
        live,
    };
    let (consumer_thread, ready) = consumer::spawn(
        ConsumerSettings {
            xid: config.sources.xid.clone(),
            cuda: config.sources.cuda.clone(),
            driver: config.sources.driver.clone(),
            batch: config.batch.clone(),
            enrich: config.enrich.clone(),
            filter,
            tracefs,
        },
        capture.clone(),
    );
    let ready = ready
        .recv()
        .context("the consumer thread ended before it was ready")??;

    let kmsg_thread = if config.sources.xid.kmsg {
        let context = capture.clone();
        let journaled = journaled_kmsg_records(config, &identity.boot_id);
        match kmsg::spawn(
            &config.sources.xid.kmsg_path,
            config.sources.xid.kmsg_start,
            Some(&config.agent.state_dir),
            journaled,
            context,
        ) {
            Ok(handle) => Some(handle),
            Err(err) => {
                tracing::warn!(%err, "kernel log not readable; XIDs come from the tracepoint only");
                None
            }
        }
    } else {
        None
    };
    // The threads hold the only other clones: once they end, the sink queues close.
    drop(capture);
    let attached: Vec<&SourceStatus> = ready.sources.iter().filter(|s| s.attached).collect();
    let tracepoint_runs = attached.iter().any(|s| s.source == "xid_tracepoint");
    if tracepoint_runs && kmsg_thread.is_some() {
        xid_stage.pair_sources();
    }
    let xid_ticker = {
        let (stage, stop) = (xid_stage.clone(), stop.clone());
        // Only paired sources hold reports back (for their twin); otherwise the tick has
        // nothing to do and the thread wakes once a second. Unparked at stop.
        let paired = tracepoint_runs && kmsg_thread.is_some();
        let period = Duration::from_millis(if paired { 50 } else { 1000 });
        std::thread::Builder::new()
            .name("gpuship-xid".into())
            .spawn(move || {
                while !stop.load(Ordering::Acquire) {
                    std::thread::park_timeout(period);
                    stage.tick();
                }
            })
            .context("starting the XID thread")?
    };
    if attached.is_empty() && kmsg_thread.is_none() {
        stop.store(true, Ordering::Release);
        let reasons: Vec<String> = ready
            .sources
            .iter()
            .map(|s| format!("{}: {}", s.source, s.detail))
            .collect();
        bail!(
            "no source could start ({}) and the kernel log is not readable",
            reasons.join("; ")
        );
    }

    let mut child = None;
    match &options.target {
        Target::AllProcesses => {}
        Target::Pid(pid) => match &ready.traced_tgids {
            Some(map) => trace_process(map, *pid)?,
            None => tracing::warn!(pid, "CUDA probes are not attached; only XIDs are recorded"),
        },
        Target::Command(argv) => {
            child = Some(command::spawn_traced(argv, ready.traced_tgids.as_ref())?)
        }
    }
    health.set_running();
    tracing::info!(
        sources = ?attached.iter().map(|s| s.source).collect::<Vec<_>>(),
        kmsg = kmsg_thread.is_some(),
        target = ?options.target,
        "capture started"
    );

    let interval = config.agent.stats_interval_secs;
    let command_exit_code = runtime.block_on(progress::wait_for_end(
        &options.target,
        child,
        interval,
        accounting.clone(),
        signals,
    ));

    health.set_draining();
    tracing::info!("draining: stopping probes, draining rings, flushing batches");
    stop.store(true, Ordering::Release);
    if consumer_thread.join().is_err() {
        tracing::error!("consumer thread panicked");
    }
    let mut kmsg_thread = kmsg_thread;
    if let Some(thread) = kmsg_thread.as_mut() {
        thread.join();
    }
    xid_ticker.thread().unpark();
    if xid_ticker.join().is_err() {
        tracing::error!("XID thread panicked");
    }
    // Both sources are done: XIDs still waiting for a twin go out now.
    xid_stage.finish();
    if let Some(thread) = &kmsg_thread {
        thread.save_cursor(&xid_stage);
    }
    drop(xid_stage);
    // Every producer is gone, so the sink queues are closed: sinks finish what they hold.
    let mut failed_sinks = Vec::new();
    for (name, task) in sink_tasks {
        match runtime.block_on(task) {
            Ok(Ok(())) => {}
            // Already logged when it happened (sinks::watched).
            Ok(Err(err)) => failed_sinks.push(err.to_string()),
            Err(err) => {
                tracing::error!(sink = %name, %err, "sink task failed");
                failed_sinks.push(format!("{name}: {err}"));
            }
        }
    }

    let snapshot = accounting.snapshot();
    if let Some(ledger) = &ledger {
        ledger.write_within(&snapshot, LEDGER_SHUTDOWN_LIMIT);
    }
    let summary = summary.lock().map(|s| s.clone()).unwrap_or_default();
    for broken in snapshot.broken_identities() {
        tracing::error!(identity = %broken, "accounting identity does not hold");
    }
    let outcome = RunOutcome {
        sources: ready
            .sources
            .iter()
            .map(|s| (s.source.to_string(), s.attached, s.detail.clone()))
            .collect(),
        accounting: snapshot,
        summary,
        command_exit_code,
    };
    progress::log_final(&outcome);
    if let Some(path) = &options.summary_json {
        let json = serde_json::to_vec_pretty(&outcome).context("encoding the summary")?;
        std::fs::write(path, json).with_context(|| format!("writing {}", path.display()))?;
    }
    if !failed_sinks.is_empty() {
        bail!("sink(s) failed: {}", failed_sinks.join("; "));
    }
    Ok(outcome)
}

/// Kernel-log sequence numbers of this boot whose XIDs a previous run journaled in any sink.
fn journaled_kmsg_records(config: &Config, boot_id: &str) -> std::collections::BTreeSet<u64> {
    use arrow_array::cast::AsArray;
    use arrow_array::types::UInt64Type;
    use arrow_array::Array;
    let mut seqs = std::collections::BTreeSet::new();
    for name in sink_names(&config.sinks) {
        let dir = config.agent.state_dir.join("spool").join(&name);
        for batch in gpuship_sinks::journaled_xids(&dir) {
            let records = &batch.records;
            let (Some(boots), Some(kmsg)) = (
                records.column_by_name("boot_id"),
                records.column_by_name("kmsg_seq"),
            ) else {
                continue;
            };
            let (Some(boots), Some(kmsg)) = (
                boots.as_string_opt::<i32>(),
                kmsg.as_primitive_opt::<UInt64Type>(),
            ) else {
                continue;
            };
            for row in 0..records.num_rows() {
                if !kmsg.is_null(row) && boots.value(row) == boot_id {
                    seqs.insert(kmsg.value(row));
                }
            }
        }
    }
    seqs
}

/// The sink's spool under `<state_dir>/spool/<sink>`, with what a previous run left in it.
fn open_spool(state_dir: &Path, sink: &str, config: &SpoolConfig) -> Option<Spool> {
    if !config.enabled {
        return None;
    }
    let dir = state_dir.join("spool").join(sink);
    match Spool::open(&dir, config.clone()) {
        Ok(spool) => {
            if !spool.is_empty() {
                tracing::info!(
                    sink,
                    dir = %dir.display(),
                    xid = spool.pending_events(gpuship_sinks::EventKind::Xid),
                    cuda = spool.pending_events(gpuship_sinks::EventKind::Cuda),
                    "spooled events from a previous run will be delivered first"
                );
            }
            Some(spool)
        }
        Err(err) => {
            tracing::error!(sink, %err, "cannot open the spool; this sink runs without one");
            None
        }
    }
}
