//! The wait phase of `gpuship run`: starts tracing the target (a pid, or a command started
//! here) and waits for the end: a signal, or the traced command or pid exiting.

use anyhow::Context;

use super::capture::Capture;
use super::start::Started;
use super::{command, progress, RunOptions, Target};
use crate::sources::cuda::probes::trace_process;

/// Traces the target, then waits for the end; the traced command's exit code, if any.
pub(super) fn wait(
    options: &RunOptions,
    started: &mut Started,
    capture: &Capture,
) -> anyhow::Result<Option<i32>> {
    let traced = capture.traced_tgids.as_ref();
    let mut child = None;
    match &options.target {
        Target::AllProcesses => {}
        Target::Pid(pid) => match traced {
            Some(map) => trace_process(map, *pid)?,
            None => tracing::warn!(pid, "CUDA probes are not attached; only XIDs are recorded"),
        },
        Target::Command(argv) => child = Some(command::spawn_traced(argv, traced)?),
    }
    started.health.set_running();
    tracing::info!(
        sources = ?capture.attached(),
        kmsg = capture.thread_runs("kmsg"),
        target = ?options.target,
        "capture started"
    );
    let signals = started
        .signals
        .take()
        .context("the stop signals were already taken")?;
    Ok(started.runtime.block_on(progress::wait_for_end(
        &options.target,
        child,
        options.config.agent.stats_interval_secs,
        started.accounting.clone(),
        signals,
    )))
}
