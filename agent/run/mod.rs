//! `gpuship run`, as five phases, each in its own module:
//! - [`start`]: checks, state directory lock, runtime, sinks with their queues and spools,
//!   accounting documents, metrics server;
//! - [`capture`]: the XID stage, the sources' outputs ([`outputs`]), every registered source;
//! - [`wait`]: trace the target, wait for a signal or the traced command or pid to exit;
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
mod sinks;
mod start;
mod wait;

use std::path::PathBuf;

use crate::accounting::Snapshot;
use crate::config::Config;
use crate::summary::RunSummary;

pub use privileges::{can_trace, effective_capabilities};
pub use sinks::{build_sink, check_sinks, sink_names};

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
    let mut started = start::start(&options.config)?;
    let capture = capture::capture(&options, &mut started)?;
    let command_exit_code = wait::wait(&options, &mut started, &capture)?;
    let drained = drain::drain(capture, &mut started);
    account::account(&options, &started, drained, command_exit_code)
}
