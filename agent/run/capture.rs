//! The capture phase of `gpuship run`: the XID stage, the sources' outputs wired to the
//! pipeline (`outputs`), the consumer thread with every ring source, then every thread source,
//! and the XID stage's timer. Fails when no source at all could start. [`Capture::stop`]
//! detaches and drains it all, at the end of the run or when a reload restarts the sources.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{bail, Context};
use gpuship_sinks::limits::nanos_i64;
use libbpf_rs::MapHandle;

use super::outputs::{FanOutEmitter, LiveCalls};
use super::start::Started;
use super::Target;
use crate::config::Config;
use crate::consumer;
use crate::enrich::driver_version;
use crate::fanout::FanOut;
use crate::sources::ProcessFilter;
use crate::sources::{self, Outputs, RunningThread, SourceSetup, SourceStatus, Started as Start};
use crate::summary::RunSummary;
use crate::xid::attribution::Attributor;
use crate::xid::{XidStage, XidStageSettings};

/// The running capture.
pub(super) struct Capture {
    /// Set to stop every source.
    pub stop: Arc<AtomicBool>,
    /// Each ring source's status at start.
    pub statuses: Vec<SourceStatus>,
    /// The traced-process map, when CUDA probes record selected processes only.
    pub traced_tgids: Option<MapHandle>,
    /// The consumer thread (every ring source).
    pub consumer: JoinHandle<()>,
    /// Every running thread source, by name.
    pub threads: Vec<(&'static str, Box<dyn RunningThread>)>,
    /// Where XIDs are reconciled, annotated and sent.
    pub xid_stage: Arc<XidStage>,
    /// Sends XIDs whose twin did not come in time.
    pub xid_ticker: JoinHandle<()>,
}

impl Capture {
    /// Names of the attached ring sources.
    pub fn attached(&self) -> Vec<&'static str> {
        let attached = self.statuses.iter().filter(|s| s.attached);
        attached.map(|s| s.source).collect()
    }

    /// Every source that runs: the attached ring sources, then the thread sources.
    pub fn running(&self) -> Vec<&'static str> {
        let mut running = self.attached();
        running.extend(self.threads.iter().map(|(name, _)| *name));
        running
    }

    /// Stops every source (probes detached, rings drained, batches flushed), lets the XID
    /// stage emit what it held, saves the sources' final state (the kmsg cursor), and drops
    /// every handle on the fan-out they held. The statuses the sources started with.
    pub fn stop(self) -> Vec<SourceStatus> {
        let Capture {
            stop,
            statuses,
            traced_tgids: _,
            consumer,
            mut threads,
            xid_stage,
            xid_ticker,
        } = self;
        stop.store(true, Ordering::Release);
        if consumer.join().is_err() {
            tracing::error!("consumer thread panicked");
        }
        for (_, thread) in threads.iter_mut() {
            thread.join();
        }
        xid_ticker.thread().unpark();
        if xid_ticker.join().is_err() {
            tracing::error!("XID thread panicked");
        }
        // Every source is done: XIDs still waiting for a twin go out now.
        xid_stage.finish();
        for (_, thread) in &threads {
            thread.finish();
        }
        statuses
    }
}

/// Starts every source of `config`, sending to the sinks' fan-out; the sources add their
/// totals to `summary` when they stop.
pub(super) fn capture(
    config: &Config,
    target: &Target,
    started: &mut Started,
    summary: Arc<Mutex<RunSummary>>,
) -> anyhow::Result<Capture> {
    let stop = Arc::new(AtomicBool::new(false));
    let fanout = started.sinks.fanout();
    let xid_stage = Arc::new(xid_stage(config, started, fanout.clone(), summary.clone()));
    let outputs = Outputs {
        batches: Arc::new(FanOutEmitter {
            fanout,
            accounting: started.accounting.clone(),
        }),
        xids: xid_stage.clone(),
        attribution: xid_stage.clone(),
        calls: Arc::new(LiveCalls(started.live.clone())),
    };
    let mut sources = config.sources.clone();
    if *target != Target::AllProcesses && !sources.cuda.stats.is_empty() {
        // One job under the microscope: every call of it is a row.
        tracing::info!(stats = ?sources.cuda.stats, "tracing selected processes: [sources.cuda] stats is ignored, every call is a row");
        sources.cuda.stats.clear();
    }
    let setup = SourceSetup {
        sources,
        batch: config.batch.clone(),
        enrich: config.enrich.clone(),
        filter: match target {
            Target::AllProcesses => ProcessFilter::All,
            Target::Pid(_) | Target::Command(_) => ProcessFilter::Selected,
        },
        identity: started.identity.clone(),
        clocks: started.clocks,
        gpus: started.gpus.clone(),
        accounting: started.accounting.clone(),
        stop: stop.clone(),
        summary: summary.clone(),
        state_dir: config.agent.state_dir.clone(),
        journaled_kmsg: std::mem::take(&mut started.journaled_kmsg),
        outputs,
    };
    let (consumer, ready) = consumer::spawn(setup.clone());
    let ready = ready
        .recv()
        .context("the consumer thread ended before it was ready")??;
    let threads = start_threads(&setup);
    // The threads and the XID stage hold the other handles on the fan-out from now on.
    drop(setup);
    // Two XID sources running (the tracepoint and the kernel log) report each XID twice: the
    // stage reconciles them.
    let xid_reporters = ready
        .sources
        .iter()
        .filter(|s| s.attached)
        .map(|s| s.source)
        .chain(threads.iter().map(|(name, _)| *name))
        .filter(|name| sources::reports_xids(name))
        .count();
    let paired = xid_reporters >= 2;
    if paired {
        xid_stage.pair_sources();
    }
    let capture = Capture {
        xid_ticker: xid_ticker(&xid_stage, &stop, paired)?,
        stop,
        statuses: ready.sources,
        traced_tgids: ready.traced_tgids,
        consumer,
        threads,
        xid_stage,
    };
    if capture.attached().is_empty() && capture.threads.is_empty() {
        let reasons: Vec<String> = capture
            .statuses
            .iter()
            .map(|s| format!("{}: {}", s.source, s.detail))
            .collect();
        capture.stop();
        let kmsg = if config.sources.xid.kmsg {
            "is not readable"
        } else {
            "is off ([sources.xid] kmsg = false)"
        };
        bail!(
            "no source could start ({}) and the kernel log {kmsg}",
            reasons.join("; ")
        );
    }
    Ok(capture)
}

/// The thread that sends XIDs whose twin did not come in time. Only paired sources hold
/// reports back; otherwise the tick has nothing to do and the thread wakes once a second.
/// Unparked at stop.
fn xid_ticker(
    stage: &Arc<XidStage>,
    stop: &Arc<AtomicBool>,
    paired: bool,
) -> anyhow::Result<JoinHandle<()>> {
    let (stage, stop) = (stage.clone(), stop.clone());
    let period = Duration::from_millis(if paired { 50 } else { 1000 });
    std::thread::Builder::new()
        .name("gpuship-xid".into())
        .spawn(move || {
            while !stop.load(Ordering::Acquire) {
                std::thread::park_timeout(period);
                stage.tick();
            }
        })
        .context("starting the XID thread")
}

/// The XID stage, sending to `fanout` and telling the live view.
fn xid_stage(
    config: &Config,
    started: &Started,
    fanout: FanOut,
    summary: Arc<Mutex<RunSummary>>,
) -> XidStage {
    let xid = &config.sources.xid;
    let stage = XidStage::new(
        started.identity.clone(),
        XidStageSettings {
            reconcile_window: Duration::from_millis(xid.reconcile_window_ms),
            incident_window: Duration::from_secs(xid.incident_window_secs),
            attribution_window: Duration::from_secs(xid.attribution_window_secs),
            driver_version: driver_version(&config.enrich.nvidia_proc_dir),
            suspects: xid.suspects,
        },
        Attributor::new(
            &config.enrich.proc_dir,
            &config.enrich.dev_dir,
            &config.enrich.pod_log_dir,
            nanos_i64(Duration::from_secs(xid.attribution_window_secs)),
        ),
        fanout,
        started.accounting.clone(),
        summary,
    );
    stage.with_live(started.live.clone())
}

/// Starts every registered thread source; one that cannot start is logged and left out.
fn start_threads(setup: &SourceSetup) -> Vec<(&'static str, Box<dyn RunningThread>)> {
    let mut threads = Vec::new();
    for source in sources::thread_sources() {
        match source.start(setup) {
            Start::Running(thread) => threads.push((source.name(), thread)),
            Start::Disabled => {}
            Start::Failed(reason) => {
                tracing::warn!(source = source.name(), err = %reason, "{}", source.not_started_message());
            }
        }
    }
    threads
}
