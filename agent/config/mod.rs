//! The agent's configuration: one TOML file, every key documented in `config/gpuship.toml`.
//!
//! Parsing is strict (`deny_unknown_fields`: a typo is an error that names the key and its
//! line), and every problem is reported at once, not just the first, each with its key and
//! line: type errors ([`parse`]), values outside their documented range ([`Config::validate`],
//! pure), and, when a file is loaded for use, what the host lacks ([`host`]: an explicitly
//! configured library that does not exist).

mod host;
mod metrics;
mod parse;
mod sinks;
mod validate;
mod validate_sinks;

use std::path::{Path, PathBuf};

use gpuship_sinks::parquet::ParquetSinkConfig;
use serde::Deserialize;
use toml::de::{DeTable, DeValue};
use toml::Spanned;

use parse::{typed, Document, Problems};

pub use crate::batcher::BatchConfig;
pub use crate::enrich::EnrichConfig;
pub use crate::sources::config::{
    CudaSourceConfig, DriverSourceConfig, KmsgStart, SourcesConfig, TracepointFields,
    XidSourceConfig,
};
pub use metrics::{MetricsConfig, OtlpMetricsConfig};
pub use sinks::{
    sink_name_problem, sink_names, CudaFilter, SinkConfig, SinkEntry, SinkOptions, OPTION_KEYS,
};
pub use validate::{ConfigError, Problem};

/// The whole file.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Config {
    /// Process-wide settings.
    pub agent: AgentConfig,
    /// What to capture.
    pub sources: SourcesConfig,
    /// How rows are grouped into record batches.
    pub batch: BatchConfig,
    /// Where GPU identities come from.
    pub enrich: EnrichConfig,
    /// The self-metrics endpoint.
    pub metrics: MetricsConfig,
    /// Where batches go. Empty means the embedded default: Parquet under `./gpuship-data`.
    pub sinks: Vec<SinkEntry>,
}

/// `[agent]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentConfig {
    /// Seconds between the one-line progress summaries in the log (0 turns them off); the
    /// accounting documents beside the data are rewritten at this period too (1 to 60 s).
    /// Was `stats_interval_secs`, which `[sources.cuda]` also has with another meaning: the
    /// old name is still read, with a warning ([`RENAMED_KEYS`]).
    #[serde(
        default = "defaults::progress_interval_secs",
        alias = "stats_interval_secs"
    )]
    pub progress_interval_secs: u64,
    /// Overrides the host name written into every row (default: the kernel's node name).
    #[serde(default)]
    pub host_name: Option<String>,
    /// Where the agent keeps state that must survive a restart (each sink's spool).
    #[serde(default = "defaults::state_dir")]
    pub state_dir: PathBuf,
    /// At shutdown, how long sinks may deliver what they hold before the rest is spooled.
    #[serde(default = "defaults::shutdown_timeout_secs")]
    pub shutdown_timeout_secs: u64,
}

mod defaults {
    use std::path::PathBuf;

    pub fn yes() -> bool {
        true
    }
    pub fn progress_interval_secs() -> u64 {
        10
    }
    pub fn state_dir() -> PathBuf {
        "./gpuship-state".into()
    }
    pub fn shutdown_timeout_secs() -> u64 {
        30
    }
    pub fn otlp_metrics_timeout_secs() -> u64 {
        10
    }
    pub fn otlp_metrics_interval_secs() -> u64 {
        60
    }
    pub fn metrics_max_connections() -> usize {
        64
    }
    pub fn metrics_address() -> String {
        "127.0.0.1:9464".into()
    }
}

macro_rules! default_from_serde {
    ($($ty:ty),*) => {$(
        impl Default for $ty {
            fn default() -> Self {
                toml::from_str("").expect("every field has a default")
            }
        }
    )*};
}
default_from_serde!(MetricsConfig, AgentConfig);

/// Keeps the default when a section could not be typed (its problems are recorded).
fn set<T>(slot: &mut T, value: Option<T>) {
    if let Some(value) = value {
        *slot = value;
    }
}

/// Keys that were renamed and are still read under their old name: (old path, new path).
pub const RENAMED_KEYS: &[(&str, &str)] =
    &[("agent.stats_interval_secs", "agent.progress_interval_secs")];

/// The renamed keys `text` still uses, each as (line, old path, new path).
pub fn renamed_keys_used(text: &str) -> Vec<(usize, &'static str, &'static str)> {
    renamed_keys_in(&parse::Lines::of(text))
}

/// The renamed keys a parsed document still uses.
fn renamed_keys_in(lines: &parse::Lines) -> Vec<(usize, &'static str, &'static str)> {
    RENAMED_KEYS
        .iter()
        .filter_map(|(old, new)| lines.line_of_key(old).map(|line| (line, *old, *new)))
        .collect()
}

/// Where the embedded default writes Parquet.
pub const DEFAULT_DATA_DIR: &str = "./gpuship-data";

impl Config {
    /// Parses and validates `text` (the contents of `origin`) without looking at the host.
    pub fn from_toml(text: &str, origin: &Path) -> Result<Config, ConfigError> {
        Self::parse_checked(text, origin, false)
    }

    /// Reads, parses and validates a file, and checks it against this host (what `validate`
    /// and `run` use): an explicitly configured library that does not exist is a problem.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            origin: path.to_path_buf(),
            source,
        })?;
        Self::parse_checked(&text, path, true)
    }

    /// Every problem of `text`: type errors in file order, then values, then (with `host`)
    /// what the host lacks.
    fn parse_checked(text: &str, origin: &Path, host: bool) -> Result<Config, ConfigError> {
        let document = Document::parse(text).map_err(|message| ConfigError::Parse {
            origin: origin.to_path_buf(),
            message,
        })?;
        let mut problems = Problems {
            text,
            list: Vec::new(),
        };
        let (config, sink_index) = Config::from_document(document.root, &mut problems);
        let mut problems = problems.list;
        problems.sort_by_key(|p| p.line);
        problems.extend(config.value_problems(&document.lines, &sink_index));
        if host {
            problems.extend(host::problems(&config, &document.lines));
        }
        for (line, old, new) in renamed_keys_in(&document.lines) {
            tracing::warn!(
                origin = %origin.display(),
                line,
                old,
                new,
                "a renamed configuration key is still read under its old name; rename it"
            );
        }
        if problems.is_empty() {
            Ok(config)
        } else {
            Err(ConfigError::Invalid {
                origin: origin.to_path_buf(),
                problems,
            })
        }
    }

    /// The typed sections of a document; each sink with its index in the file (a sink whose
    /// type or required keys are wrong is left out, its problems recorded).
    fn from_document(root: Spanned<DeTable<'_>>, problems: &mut Problems) -> (Config, Vec<usize>) {
        let mut config = Config::default();
        let mut sink_index = Vec::new();
        for (key, value) in root.into_inner() {
            let offset = key.span().start;
            match key.get_ref().as_ref() {
                "agent" => set(&mut config.agent, typed(value, "agent", problems)),
                "sources" => set(&mut config.sources, typed(value, "sources", problems)),
                "batch" => set(&mut config.batch, typed(value, "batch", problems)),
                "enrich" => set(&mut config.enrich, typed(value, "enrich", problems)),
                "metrics" => set(&mut config.metrics, typed(value, "metrics", problems)),
                "sinks" => match value.into_inner() {
                    DeValue::Array(items) => {
                        for (index, item) in items.into_iter().enumerate() {
                            if let Some(entry) = SinkEntry::parse(index, item, problems) {
                                config.sinks.push(entry);
                                sink_index.push(index);
                            }
                        }
                    }
                    _ => problems.at("sinks", offset, "must be a list of tables: [[sinks]]"),
                },
                other => problems.at(
                    other,
                    offset,
                    format!(
                        "unknown section `{other}`, expected one of `agent`, `sources`, \
                         `batch`, `enrich`, `metrics`, `sinks`"
                    ),
                ),
            }
        }
        (config, sink_index)
    }

    /// The configuration used without a file: every source, Parquet under ./gpuship-data.
    pub fn embedded_default() -> Config {
        let mut config = Config::default();
        config.apply_default_sink();
        config
    }

    /// Adds the default Parquet sink when no sink is configured.
    pub fn apply_default_sink(&mut self) {
        if self.sinks.is_empty() {
            self.sinks.push(SinkEntry::new(SinkConfig::Parquet(
                ParquetSinkConfig::with_path(DEFAULT_DATA_DIR),
            )));
        }
    }
}

#[cfg(test)]
mod fuzz_tests;
#[cfg(test)]
mod tests;
