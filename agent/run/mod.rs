//! `gpuship run`, as five phases, each in its own module:
//! - [`start`]: checks, state directory lock, runtime, sinks with their queues and spools
//!   ([`sink_set`]), accounting documents, metrics server;
//! - [`capture`]: the XID stage, the sources' outputs ([`outputs`]), every registered source;
//! - [`wait`]: trace the target, wait for a signal or the traced command or pid to exit; a
//!   SIGHUP on the way reloads the configuration ([`reload`]) and waits again;
//! - [`drain`]: stop probes, drain rings, flush batches, let the XID stage and the sinks finish;
//! - [`account`]: final counters, summary, `--summary-json`.

mod account;
mod capture;
mod command;
mod drain;
mod ledger;
mod outputs;
mod privileges;
mod progress;
mod reload;
mod sink_set;
mod sinks;
mod start;
mod wait;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use progress::Wake;

use crate::accounting::Snapshot;
use crate::config::Config;
use crate::summary::RunSummary;

pub use privileges::{can_trace, effective_capabilities};
pub use sinks::{build_sink, check_sinks, sink_names, start_problems};

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
    /// The file it was read from, read again at every SIGHUP (`None`: the embedded default).
    pub config_path: Option<PathBuf>,
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

/// Runs the agent until the end condition of `options.target`, reloading the configuration
/// at every SIGHUP, then drains.
pub fn run(options: RunOptions) -> anyhow::Result<RunOutcome> {
    let mut config = options.config.clone();
    let mut started = start::start(&config)?;
    let summary = Arc::new(Mutex::new(RunSummary::default()));
    let first = capture::capture(&config, &options.target, &mut started, summary.clone())?;
    let mut waiter = wait::begin(&options, &mut started, &first)?;
    let mut capture = Some(first);
    let (command_exit_code, failure) = loop {
        match started.runtime.block_on(waiter.next()) {
            Wake::End(code) => break (code, None),
            Wake::Reload => {
                let mut running = reload::Running {
                    path: options.config_path.as_ref(),
                    target: &options.target,
                    config: &mut config,
                    started: &mut started,
                    capture: &mut capture,
                    summary: &summary,
                    waiter: &mut waiter,
                };
                if let Err(err) = running.reload() {
                    break (None, Some(err));
                }
            }
        }
    };
    let drained = drain::drain(capture, &mut started);
    let outcome = account::account(&options, &started, drained, &summary, command_exit_code);
    match failure {
        Some(err) => Err(err.context("no capture could be started again after a reload")),
        None => outcome,
    }
}
