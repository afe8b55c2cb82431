//! The drain phase of `gpuship run`, in order: stop the sources (probes detached, rings
//! drained, batches flushed), let the XID stage emit what it held, save the sources' final
//! state, then let every sink finish what it holds.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use super::capture::Capture;
use super::start::{SinkTask, Started};
use crate::sources::SourceStatus;
use crate::summary::RunSummary;

/// What the sources leave for the account phase.
pub(super) struct Drained {
    /// Each ring source's status at start.
    pub statuses: Vec<SourceStatus>,
    /// The run summary, complete.
    pub summary: Arc<Mutex<RunSummary>>,
    /// Sinks that failed, as messages.
    pub failed_sinks: Vec<String>,
}

/// Stops every source, then waits for every sink.
pub(super) fn drain(capture: Capture, started: &mut Started) -> Drained {
    started.health.set_draining();
    tracing::info!("draining: stopping probes, draining rings, flushing batches");
    let (statuses, summary) = stop_sources(capture);
    // Every source has counted its last XID and call: the collector gets the final totals.
    if let Some(export) = &started.metrics_export {
        started.runtime.block_on(export.export_now());
    }
    // Every producer is gone, so the sink queues are closed: sinks finish what they hold.
    let tasks = std::mem::take(&mut started.sink_tasks);
    let failed_sinks = finish_sinks(tasks, &started.runtime);
    Drained {
        statuses,
        summary,
        failed_sinks,
    }
}

/// Stops the sources and drops every handle on the sinks' queues they held.
fn stop_sources(capture: Capture) -> (Vec<SourceStatus>, Arc<Mutex<RunSummary>>) {
    let Capture {
        stop,
        summary,
        statuses,
        traced_tgids: _,
        consumer,
        mut threads,
        xid_stage,
        xid_ticker,
    } = capture;
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
    // The threads and the stage hold the last handles on the sinks' queues.
    drop(threads);
    drop(xid_stage);
    (statuses, summary)
}

/// Waits for every sink task; the failed ones as messages.
fn finish_sinks(tasks: Vec<SinkTask>, runtime: &tokio::runtime::Runtime) -> Vec<String> {
    let mut failed_sinks = Vec::new();
    for (name, task) in tasks {
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
    failed_sinks
}
