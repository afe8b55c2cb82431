//! Reloading the configuration on SIGHUP, as Vector and Fluent Bit do: the file the agent was
//! started with is read and validated again; a file that cannot be used is refused whole
//! (logged once with every problem and its line, counted as `rejected`) and the agent runs on
//! as it was; a valid one is applied whole.
//!
//! A [`Reload`] is the validated configuration and what it changes. Applying it:
//! - `[sources]`, `[batch]` or `[enrich]` changed: the capture is stopped as at shutdown
//!   (probes detached, rings drained, batches flushed, XIDs held for a twin sent, the kmsg
//!   cursor saved) and started again with the new settings. Calls made between the two are
//!   not captured: that is the *capture gap*, logged and exposed. XIDs logged in the kernel
//!   log meanwhile are read after it (the cursor), each once. When the new sources cannot
//!   start at all, the old ones are started again and the reload is rejected.
//! - sinks changed: see [`super::sink_set`]; capture goes on meanwhile.
//! - `[agent] progress_interval_secs`: the progress line's period.
//!
//! What lives for the whole run cannot change by reload, and a file that changes it is
//! refused: the state directory (its lock, spools, cursor), the host name written into rows,
//! and `[metrics]` (the endpoint being scraped). The metrics server, the counters, the state
//! directory and the accounting documents carry on across every reload.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use super::capture::{self, Capture};
use super::progress::Waiter;
use super::sink_set::{SinkChanges, SinkSet};
use super::start::Started;
use super::{privileges, sinks, Target};
use crate::config::{Config, ConfigError};
use crate::enrich::GpuDirectory;
use crate::summary::RunSummary;

/// A validated configuration to switch to, and what it changes.
#[derive(Debug)]
pub(super) struct Reload {
    /// The new configuration.
    pub config: Config,
    /// Whether the capture restarts (`[sources]`, `[batch]` or `[enrich]` changed).
    pub restarts_sources: bool,
    /// What happens to the sinks.
    pub sinks: SinkChanges,
}

/// Why a reload was refused, as one line for the log.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Rejected(pub String);

impl Reload {
    /// Reads and checks the configuration at `path` (the embedded default without one)
    /// against the running `current`, as `gpuship run` would at start.
    pub fn prepare(
        path: Option<&Path>,
        current: &Config,
        target: &Target,
        sinks: &SinkSet,
    ) -> Result<Reload, Rejected> {
        let mut config = match path {
            Some(path) => Config::load(path).map_err(|err| Rejected(one_line(&err)))?,
            None => Config::default(),
        };
        config.apply_default_sink();
        for (section, changed) in [
            (
                "[agent] state_dir",
                config.agent.state_dir != current.agent.state_dir,
            ),
            (
                "[agent] host_name",
                config.agent.host_name != current.agent.host_name,
            ),
            ("[metrics]", config.metrics != current.metrics),
        ] {
            if changed {
                return Err(Rejected(format!(
                    "{section} cannot change while the agent runs; restart it to apply this file"
                )));
            }
        }
        let restarts_sources = config.sources != current.sources
            || config.batch != current.batch
            || config.enrich != current.enrich;
        if restarts_sources && *target != Target::AllProcesses {
            return Err(Rejected(
                "[sources], [batch] and [enrich] cannot change while tracing one command or pid"
                    .into(),
            ));
        }
        if restarts_sources {
            privileges::check(&config.sources.bpf_sources_on())
                .map_err(|err| Rejected(format!("{err:#}")))?;
        }
        let changes = sinks.changes(&config);
        let names = sinks::sink_names(&config.sinks);
        for (name, entry) in names.iter().zip(&config.sinks) {
            if changes.added.contains(name) || changes.replaced.contains(name) {
                sinks::check_start(&entry.sink)
                    .map_err(|reason| Rejected(format!("sink {name} cannot start: {reason}")))?;
            }
        }
        Ok(Reload {
            config,
            restarts_sources,
            sinks: changes,
        })
    }

    /// True when the file is the configuration the agent runs.
    pub fn changes_nothing(&self) -> bool {
        !self.restarts_sources && self.sinks.is_empty()
    }
}

/// A configuration error on one line: every problem with its line, the parser's message
/// without its drawing of the line.
fn one_line(err: &ConfigError) -> String {
    match err {
        ConfigError::Invalid { origin, problems } => format!(
            "invalid config {}: {}",
            origin.display(),
            problems
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ")
        ),
        ConfigError::Parse { origin, message } => {
            let lines: Vec<&str> = message
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with('|') && !l.contains(" | "))
                .collect();
            format!("invalid config {}: {}", origin.display(), lines.join(": "))
        }
        ConfigError::Read { .. } => err.to_string(),
    }
}

/// What a reload acts on: the parts of the run that live across it.
pub(super) struct Running<'a> {
    /// The file the agent was started with (`None`: the embedded default).
    pub path: Option<&'a PathBuf>,
    /// What is traced.
    pub target: &'a Target,
    /// The configuration in force; replaced when a reload is applied.
    pub config: &'a mut Config,
    /// The start phase's state (sinks, locks, counters).
    pub started: &'a mut Started,
    /// The capture; `None` only when it could not be started again (the run then ends).
    pub capture: &'a mut Option<Capture>,
    /// The run summary every capture adds to.
    pub summary: &'a Arc<Mutex<RunSummary>>,
    /// The wait phase (its progress period).
    pub waiter: &'a mut Waiter,
}

impl Running<'_> {
    /// Reloads the configuration; an error only when no capture could be started again.
    pub fn reload(&mut self) -> anyhow::Result<()> {
        let path = self.path.map(PathBuf::as_path);
        let prepared = Reload::prepare(path, self.config, self.target, &self.started.sinks)
            .and_then(|reload| {
                let locks = &mut self.started.locks;
                locks
                    .lock_new_roots(&reload.config)
                    .map_err(|err| Rejected(err.to_string()))?;
                Ok(reload)
            });
        let reload = match prepared {
            Ok(reload) => reload,
            Err(Rejected(reason)) => {
                self.reject(&reason);
                return Ok(());
            }
        };
        if reload.changes_nothing() {
            self.waiter
                .set_progress_interval(reload.config.agent.progress_interval_secs);
            *self.config = reload.config;
            match path {
                Some(path) => tracing::info!(config = %path.display(), "configuration reloaded: nothing to change"),
                None => tracing::info!("configuration reloaded: no file was given, the embedded default is applied again (nothing to change)"),
            }
            self.started
                .accounting
                .reloads
                .applied(SystemTime::now(), None);
            return Ok(());
        }
        self.apply(reload)
    }

    fn reject(&self, reason: &str) {
        tracing::error!(
            error = %reason,
            "configuration reload rejected; still running on the previous configuration"
        );
        self.started.accounting.reloads.rejected();
    }

    fn apply(&mut self, reload: Reload) -> anyhow::Result<()> {
        let gap = if reload.restarts_sources {
            match self.restart_sources(&reload.config)? {
                Ok(gap) => Some(gap),
                Err(reason) => {
                    self.reject(&reason);
                    return Ok(());
                }
            }
        } else {
            None
        };
        let held = if reload.sinks.is_empty() {
            Duration::ZERO
        } else {
            let started = &mut *self.started;
            started.sinks.apply(
                &reload.config,
                &reload.sinks,
                &started.runtime,
                &started.accounting,
            )
        };
        self.waiter
            .set_progress_interval(reload.config.agent.progress_interval_secs);
        *self.config = reload.config;
        self.started
            .accounting
            .reloads
            .applied(SystemTime::now(), gap);
        let millis = |d: Duration| format!("{:.1}", d.as_secs_f64() * 1e3);
        tracing::info!(
            sources_restarted = reload.restarts_sources,
            capture_gap_ms = gap.map(millis),
            sinks_added = ?reload.sinks.added,
            sinks_removed = ?reload.sinks.removed,
            sinks_replaced = ?reload.sinks.replaced,
            producers_held_ms = millis(held),
            "configuration reloaded"
        );
        Ok(())
    }

    /// Stops the capture and starts it with `config`'s sources: the capture gap, or why the
    /// new sources could not start (the old ones then run again). An error when neither could.
    fn restart_sources(&mut self, config: &Config) -> anyhow::Result<Result<Duration, String>> {
        let stopping = Instant::now();
        if let Some(capture) = self.capture.take() {
            capture.stop();
        }
        // The stopped programs' final counts stay in every ring's totals.
        self.started.accounting.retire_kernel_counters();
        let starting = Instant::now();
        let started = &mut *self.started;
        started.gpus = Arc::new(GpuDirectory::load(&config.enrich.nvidia_proc_dir));
        match capture::capture(config, self.target, started, self.summary.clone()) {
            Ok(capture) => {
                *self.capture = Some(capture);
                let ms = |d: Duration| format!("{:.1}", d.as_secs_f64() * 1e3);
                tracing::info!(
                    stop_ms = ms(starting - stopping),
                    start_ms = ms(starting.elapsed()),
                    "sources restarted with the new configuration"
                );
                Ok(Ok(stopping.elapsed()))
            }
            Err(err) => {
                let reason = format!("the new sources could not start: {err:#}");
                tracing::error!(%reason, "starting the previous sources again");
                let previous = &*self.config;
                started.gpus = Arc::new(GpuDirectory::load(&previous.enrich.nvidia_proc_dir));
                let capture =
                    capture::capture(previous, self.target, started, self.summary.clone())?;
                *self.capture = Some(capture);
                Ok(Err(reason))
            }
        }
    }
}

#[cfg(test)]
mod tests;
