//! Waiting for the end of a run or a reload request (the signals as a [`Wake`] value), with a
//! one-line progress summary every few seconds, and the final report.

use std::sync::Arc;
use std::time::{Duration, Instant};

use gpuship_sinks::limits;
use tokio::signal::unix::{signal, Signal, SignalKind};

use super::{RunOutcome, Target};
use crate::accounting::{Accounting, Snapshot};

/// SIGTERM, SIGINT and SIGHUP handlers, installed at the very start of a run: a stop request
/// during startup is honoured (with a drain) instead of killing the process, and a reload
/// request made then is served once capture runs.
pub struct Signals {
    sigterm: Option<Signal>,
    sigint: Option<Signal>,
    sighup: Option<Signal>,
}

impl Signals {
    /// Installs the handlers; must be called inside the runtime.
    pub fn install() -> Self {
        Self {
            sigterm: signal(SignalKind::terminate()).ok(),
            sigint: signal(SignalKind::interrupt()).ok(),
            sighup: signal(SignalKind::hangup()).ok(),
        }
    }
}

/// Why the wait phase woke.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wake {
    /// The run ends: a stop signal, or the traced command (with its exit code) or pid ended.
    End(Option<i32>),
    /// SIGHUP: reload the configuration. Signals that arrive while a reload runs are merged
    /// into one more.
    Reload,
}

/// Waits for the end of the run or a reload request, logging progress meanwhile.
pub struct Waiter {
    signals: Signals,
    /// The traced command's exit code, once it exits.
    child_exit: Option<tokio::task::JoinHandle<Option<i32>>>,
    /// Ends when the traced pid is gone.
    pid_gone: Option<tokio::task::JoinHandle<()>>,
    accounting: Arc<Accounting>,
    progress_interval_secs: u64,
    ticker: tokio::time::Interval,
    previous: (Instant, Snapshot),
}

impl Waiter {
    /// Starts watching `target` (and `child`, the command started for it); must be called
    /// inside the runtime.
    pub fn new(
        target: &Target,
        child: Option<super::command::TracedChild>,
        progress_interval_secs: u64,
        accounting: Arc<Accounting>,
        signals: Signals,
    ) -> Self {
        let child_exit = child.map(|child| tokio::task::spawn_blocking(move || child.wait().ok()));
        let pid_gone = match *target {
            Target::Pid(pid) => Some(tokio::spawn(async move {
                let path = format!("/proc/{pid}");
                while std::path::Path::new(&path).exists() {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                tracing::info!(pid, "traced process exited");
            })),
            _ => None,
        };
        let previous = (Instant::now(), accounting.snapshot());
        Self {
            signals,
            child_exit,
            pid_gone,
            ticker: ticker(progress_interval_secs),
            progress_interval_secs,
            accounting,
            previous,
        }
    }

    /// Logs progress every `progress_interval_secs` from now on (0: never).
    pub fn set_progress_interval(&mut self, progress_interval_secs: u64) {
        if progress_interval_secs != self.progress_interval_secs {
            self.progress_interval_secs = progress_interval_secs;
            self.ticker = ticker(progress_interval_secs);
        }
    }

    /// The next reason to wake.
    pub async fn next(&mut self) -> Wake {
        let Waiter {
            signals,
            child_exit,
            pid_gone,
            accounting,
            progress_interval_secs,
            ticker,
            previous,
        } = self;
        loop {
            tokio::select! {
                _ = recv(&mut signals.sigterm) => { tracing::info!("SIGTERM received"); return Wake::End(None); }
                _ = recv(&mut signals.sigint) => { tracing::info!("SIGINT received"); return Wake::End(None); }
                _ = recv(&mut signals.sighup) => { tracing::info!("SIGHUP received: reloading the configuration"); return Wake::Reload; }
                code = finished(child_exit) => {
                    let code = code.flatten();
                    tracing::info!(exit_code = ?code, "traced command exited");
                    return Wake::End(code);
                }
                _ = finished(pid_gone) => return Wake::End(None),
                _ = ticker.tick(), if *progress_interval_secs > 0 => {
                    let now = (Instant::now(), accounting.snapshot());
                    log_progress(previous, &now);
                    *previous = now;
                }
            }
        }
    }
}

/// Ticks every `progress_interval_secs` (at least 1 s), the first one after a period.
fn ticker(progress_interval_secs: u64) -> tokio::time::Interval {
    // Saturating: a huge interval must not overflow the clock (validation bounds it too).
    let period = Duration::from_secs(progress_interval_secs.max(1)).min(limits::MAX_WAIT);
    let first = limits::instant_after(Instant::now(), period);
    tokio::time::interval_at(first.into(), period)
}

/// The task's output once it ends (`None` if it failed); never, without a task.
async fn finished<T>(task: &mut Option<tokio::task::JoinHandle<T>>) -> Option<T> {
    match task {
        Some(handle) => {
            let output = handle.await.ok();
            *task = None;
            output
        }
        None => std::future::pending().await,
    }
}

async fn recv(signal: &mut Option<Signal>) {
    match signal {
        Some(signal) => {
            signal.recv().await;
        }
        None => std::future::pending().await,
    }
}

fn log_progress(previous: &(Instant, Snapshot), now: &(Instant, Snapshot)) {
    let seconds = now.0.duration_since(previous.0).as_secs_f64().max(0.001);
    let rate = |ring: &str| {
        let received = |s: &Snapshot| s.ring(ring).map_or(0, |r| r.received);
        (received(&now.1) - received(&previous.1).min(received(&now.1))) as f64 / seconds
    };
    let lost: u64 = now.1.rings.iter().map(|r| r.lost_in_kernel).sum();
    let delivered: u64 = now.1.sinks.iter().map(|s| s.delivered).sum();
    let dropped: u64 = now.1.sinks.iter().map(|s| s.dropped).sum();
    let failed: u64 = now.1.sinks.iter().map(|s| s.failed).sum();
    let spooled: u64 = now.1.sinks.iter().map(|s| s.spooled_pending).sum();
    tracing::info!(
        cuda_per_sec = format!("{:.0}", rate("cuda")),
        xid_tracepoint_per_sec = format!("{:.1}", rate("xid")),
        kmsg_xids = now.1.kmsg.xids,
        lost_in_kernel = lost,
        written = delivered,
        dropped,
        failed,
        spooled,
        "progress"
    );
    // XID reports the kernel ring dropped: loud, since NVML would not have them either.
    let xid_lost = |s: &Snapshot| s.ring("xid").map_or(0, |r| r.lost_in_kernel);
    let newly_lost = xid_lost(&now.1).saturating_sub(xid_lost(&previous.1));
    if newly_lost > 0 {
        tracing::error!(
            lost = newly_lost,
            total = xid_lost(&now.1),
            "XID tracepoint reports lost in the kernel ring; the kernel log may still have them"
        );
    }
}

/// Logs the final accounting and prints the human summary to stderr.
pub fn log_final(outcome: &RunOutcome) {
    for ring in &outcome.accounting.rings {
        tracing::info!(
            ring = ring.ring,
            emitted = ring.emitted,
            received = ring.received,
            lost_in_kernel = ring.lost_in_kernel,
            decode_errors = ring.decode_errors,
            unmatched_returns = ring.unmatched_returns,
            inflight_full = ring.inflight_full,
            aggregated = ring.aggregated,
            aggregated_received = ring.aggregated_received,
            stats_full = ring.stats_full,
            flight_recorded = ring.flight_recorded,
            unnamed_requests = ring.unnamed_requests,
            unknown_kernel_launches = ring.unknown_kernel_launches,
            kernel_names_dropped = ring.kernel_names_dropped,
            "final ring accounting"
        );
    }
    let kmsg = &outcome.accounting.kmsg;
    tracing::info!(
        xids = kmsg.xids,
        parse_errors = kmsg.parse_errors,
        lost_gaps = kmsg.lost_gaps,
        "final kernel log accounting"
    );
    for sink in &outcome.accounting.sinks {
        tracing::info!(
            sink = %sink.sink,
            kind = %sink.kind,
            received = sink.received,
            delivered = sink.delivered,
            dropped = sink.dropped,
            failed = sink.failed,
            in_flight = sink.in_flight,
            "final sink accounting"
        );
    }
    if crate::logging::json() {
        // JSON logs are one object per line: the summary goes as one more.
        let summary = serde_json::to_value(&outcome.summary).unwrap_or_default();
        tracing::info!(summary = %summary, "run summary");
    } else {
        eprintln!("\n{}", outcome.summary.render());
    }
}
