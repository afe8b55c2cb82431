//! The wait phase of `gpuship run`: starts tracing the target (a pid, or a command started
//! here), then waits for what comes next: a signal to stop or reload, or the traced command or
//! pid exiting ([`Waiter::next`]).

use anyhow::Context;

use super::capture::Capture;
use super::progress::Waiter;
use super::start::Started;
use super::{command, RunOptions, Target};
use crate::sources::trace_process;

/// Traces the target, says that capture runs, and returns what waits for the end.
pub(super) fn begin(
    options: &RunOptions,
    started: &mut Started,
    capture: &Capture,
) -> anyhow::Result<Waiter> {
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
        sources = ?capture.running(),
        target = ?options.target,
        "capture started"
    );
    let signals = started
        .signals
        .take()
        .context("the signals were already taken")?;
    let _runtime = started.runtime.enter();
    Ok(Waiter::new(
        &options.target,
        child,
        options.config.agent.progress_interval_secs,
        started.accounting.clone(),
        signals,
    ))
}
