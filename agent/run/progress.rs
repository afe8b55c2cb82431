//! Waiting for the end of a run, with a one-line progress summary every few seconds, and the
//! final report.

use std::sync::Arc;
use std::time::{Duration, Instant};

use gpuship_sinks::limits;
use tokio::signal::unix::{signal, SignalKind};

use super::{RunOutcome, Target};
use crate::accounting::{Accounting, Snapshot};

/// SIGTERM and SIGINT handlers, installed at the very start of a run so that a stop request
/// during startup is honoured (with a drain) instead of killing the process.
pub struct StopSignals {
    sigterm: Option<tokio::signal::unix::Signal>,
    sigint: Option<tokio::signal::unix::Signal>,
}

impl StopSignals {
    /// Installs the handlers; must be called inside the runtime.
    pub fn install() -> Self {
        Self {
            sigterm: signal(SignalKind::terminate()).ok(),
            sigint: signal(SignalKind::interrupt()).ok(),
        }
    }
}

/// Resolves when a signal arrives or the traced command / pid exits; returns the command's
/// exit code when there was one.
pub async fn wait_for_end(
    target: &Target,
    child: Option<super::command::TracedChild>,
    stats_interval_secs: u64,
    accounting: Arc<Accounting>,
    signals: StopSignals,
) -> Option<i32> {
    let StopSignals {
        mut sigterm,
        mut sigint,
    } = signals;
    let child_exit = async move {
        match child {
            Some(child) => tokio::task::spawn_blocking(move || child.wait().ok())
                .await
                .ok()
                .flatten(),
            None => std::future::pending().await,
        }
    };
    tokio::pin!(child_exit);
    let pid_gone = async {
        match target {
            Target::Pid(pid) => {
                let path = format!("/proc/{pid}");
                while std::path::Path::new(&path).exists() {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                tracing::info!(pid, "traced process exited");
            }
            _ => std::future::pending::<()>().await,
        }
    };
    tokio::pin!(pid_gone);
    // Saturating: a huge interval must not overflow the clock (validation bounds it too).
    let period = Duration::from_secs(stats_interval_secs.max(1)).min(limits::MAX_WAIT);
    let first = limits::instant_after(Instant::now(), period);
    let mut ticker = tokio::time::interval_at(first.into(), period);
    let mut previous = (Instant::now(), accounting.snapshot());
    loop {
        tokio::select! {
            _ = recv(&mut sigterm) => { tracing::info!("SIGTERM received"); return None; }
            _ = recv(&mut sigint) => { tracing::info!("SIGINT received"); return None; }
            code = &mut child_exit => { tracing::info!(exit_code = ?code, "traced command exited"); return code; }
            _ = &mut pid_gone => return None,
            _ = ticker.tick(), if stats_interval_secs > 0 => {
                let now = (Instant::now(), accounting.snapshot());
                log_progress(&previous, &now);
                previous = now;
            }
        }
    }
}

async fn recv(signal: &mut Option<tokio::signal::unix::Signal>) {
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
