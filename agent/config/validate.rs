//! Pure validation of a parsed [`Config`]: every problem, each with where it is in the file.
//! Every size and duration has a documented range (config/gpuship.toml); values outside it are
//! problems, so nothing downstream sees a value its arithmetic was not written for.

use std::fmt;
use std::ops::RangeInclusive;
use std::path::PathBuf;

use gpuship_sinks::limits::out_of_range;

use super::parse::Lines;
use super::Config;

/// Why a configuration cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config {}: {source}", origin.display())]
    Read {
        /// The file.
        origin: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// Not valid TOML, an unknown key, or a value of the wrong type. The message from the TOML
    /// parser names the line, the column and the key.
    #[error("invalid config {}:\n{message}", origin.display())]
    Parse {
        /// The file.
        origin: PathBuf,
        /// Parser message with line and column.
        message: String,
    },
    /// Well-formed but with values that cannot work; lists every one.
    #[error("invalid config {}: {} problem(s)\n{}", origin.display(), problems.len(), list(problems))]
    Invalid {
        /// The file.
        origin: PathBuf,
        /// Everything wrong with it.
        problems: Vec<Problem>,
    },
}

fn list(problems: &[Problem]) -> String {
    problems
        .iter()
        .map(|p| format!("  - {p}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// One bad value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Dotted key path, e.g. `sources.cuda.ring_size_mib` or `sinks[1].zstd_level`.
    pub key: String,
    /// 1-based line of the key (or of its table) when the file names it.
    pub line: Option<usize>,
    /// What is wrong and what is allowed.
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "line {line}: {}: {}", self.key, self.message),
            None => write!(f, "{}: {}", self.key, self.message),
        }
    }
}

/// Collects problems, finding each key's line in the parsed document.
pub(super) struct Report<'a> {
    lines: &'a Lines,
    pub problems: Vec<Problem>,
}

impl<'a> Report<'a> {
    pub fn new(lines: &'a Lines) -> Self {
        Self {
            lines,
            problems: Vec::new(),
        }
    }

    /// A problem with `key` (a dotted path such as `sources.cuda.ring_size_mib`), named as the
    /// file writes it: a renamed key the file still gives under its old name
    /// ([`super::RENAMED_KEYS`]) is reported under that name.
    pub fn add(&mut self, table: &str, key: &str, message: impl Into<String>) {
        let path = if table.is_empty() {
            key.to_string()
        } else {
            format!("{table}.{key}")
        };
        let path = super::RENAMED_KEYS
            .iter()
            .find(|(old, new)| *new == path && self.lines.line_of_key(old).is_some())
            .map_or(path, |(old, _)| (*old).to_string());
        self.problems.push(Problem {
            line: self.lines.find(&path),
            key: path,
            message: message.into(),
        });
    }

    /// A problem when `value` is outside `range`.
    pub fn range<T: PartialOrd + fmt::Display>(
        &mut self,
        table: &str,
        key: &str,
        value: T,
        range: RangeInclusive<T>,
    ) {
        if let Some(message) = out_of_range(value, range) {
            self.add(table, key, message);
        }
    }
}

impl Config {
    /// Checks every value; `text` is the source the config was parsed from (for line numbers).
    pub fn validate(&self, text: &str, origin: &std::path::Path) -> Result<(), ConfigError> {
        let problems = self.problems(text);
        if problems.is_empty() {
            Ok(())
        } else {
            Err(ConfigError::Invalid {
                origin: origin.to_path_buf(),
                problems,
            })
        }
    }

    /// Every problem with the values, in file order of their sections.
    pub fn problems(&self, text: &str) -> Vec<Problem> {
        let sink_index: Vec<usize> = (0..self.sinks.len()).collect();
        self.value_problems(&Lines::of(text), &sink_index)
    }

    /// Every problem with the values; `sink_index` is each sink's position in the file.
    pub(super) fn value_problems(&self, lines: &Lines, sink_index: &[usize]) -> Vec<Problem> {
        let mut report = Report::new(lines);
        self.agent_problems(&mut report);
        self.source_problems(&mut report);
        // Batches are built in memory before any sink sees them.
        report.range(
            "batch",
            "max_events",
            self.batch.max_events as u64,
            1..=1_048_576,
        );
        report.range(
            "batch",
            "max_bytes",
            self.batch.max_bytes as u64,
            1..=1 << 30,
        );
        report.range("batch", "timeout_ms", self.batch.timeout_ms, 1..=60_000);
        if self
            .metrics
            .address
            .parse::<std::net::SocketAddr>()
            .is_err()
        {
            report.add(
                "metrics",
                "address",
                format!("{:?} is not an IP:port address", self.metrics.address),
            );
        }
        report.range(
            "metrics",
            "max_connections",
            self.metrics.max_connections as u64,
            1..=1024,
        );
        if let Some(otlp) = &self.metrics.otlp {
            report.range(
                "metrics.otlp",
                "interval_secs",
                otlp.interval_secs,
                1..=3_600,
            );
            // The transport's own checks; its sink-only keys keep their valid defaults.
            for (key, message) in otlp.connection().problems() {
                report.add("metrics.otlp", &key, message);
            }
        }
        self.sink_problems(&mut report, sink_index);
        report.problems
    }

    fn agent_problems(&self, report: &mut Report) {
        if let Some(host) = &self.agent.host_name {
            if host.trim().is_empty() {
                report.add("agent", "host_name", "must not be empty when set");
            }
        }
        if self.agent.state_dir.as_os_str().is_empty() {
            report.add("agent", "state_dir", "must not be empty");
        }
        let agent = &self.agent;
        report.range(
            "agent",
            "progress_interval_secs",
            agent.progress_interval_secs,
            0..=86_400,
        );
        report.range(
            "agent",
            "shutdown_timeout_secs",
            agent.shutdown_timeout_secs,
            0..=3_600,
        );
    }

    /// The sources check their own tables ([`SourcesConfig::problems`]); here each problem
    /// gets its path and line.
    fn source_problems(&self, report: &mut Report) {
        for (table, key, message) in self.sources.problems() {
            report.add(table, &key, message);
        }
    }
}
