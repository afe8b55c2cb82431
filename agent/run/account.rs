//! The account phase of `gpuship run`: the final counters (written beside the data and to
//! `--summary-json`), the identities checked, the summary logged.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{bail, Context};

use super::drain::Drained;
use super::start::Started;
use super::{progress, RunOptions, RunOutcome};
use crate::summary::RunSummary;

/// How long the final accounting document may take at shutdown (a stop must finish within
/// the service manager's limit: 60 s in deploy/).
const LEDGER_SHUTDOWN_LIMIT: Duration = Duration::from_secs(10);

/// The outcome of the run; an error when a sink failed (after everything is reported).
pub(super) fn account(
    options: &RunOptions,
    started: &Started,
    drained: Drained,
    summary: &Arc<Mutex<RunSummary>>,
    command_exit_code: Option<i32>,
) -> anyhow::Result<RunOutcome> {
    let snapshot = started.accounting.snapshot();
    if let Some(ledger) = &started.ledger {
        ledger.write_within(&snapshot, LEDGER_SHUTDOWN_LIMIT);
    }
    let summary = summary.lock().map(|s| s.clone()).unwrap_or_default();
    for broken in snapshot.broken_identities() {
        tracing::error!(identity = %broken, "accounting identity does not hold");
    }
    let outcome = RunOutcome {
        sources: drained
            .statuses
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
    if !drained.failed_sinks.is_empty() {
        bail!("sink(s) failed: {}", drained.failed_sinks.join("; "));
    }
    Ok(outcome)
}
