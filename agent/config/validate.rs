//! Pure validation of a parsed [`Config`]: every problem, each with where it is in the file.

use std::fmt;
use std::path::PathBuf;

use super::{Config, SinkConfig};
use gpuship_sinks::EventKind;

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

/// Collects problems, finding lines in the source text.
struct Report<'a> {
    text: &'a str,
    problems: Vec<Problem>,
}

impl Report<'_> {
    fn add(&mut self, table: &str, key: &str, message: impl Into<String>) {
        let line = find_key_line(self.text, &format!("[{table}]"), 0, key);
        self.problems.push(Problem {
            key: format!("{table}.{key}"),
            line,
            message: message.into(),
        });
    }

    fn add_sink(&mut self, index: usize, key: &str, message: impl Into<String>) {
        let line = find_key_line(self.text, "[[sinks]]", index, key);
        self.problems.push(Problem {
            key: format!("sinks[{index}].{key}"),
            line,
            message: message.into(),
        });
    }
}

/// Line of `key = ...` inside the `nth` table whose header is `header`; the header's own line
/// when the key is not written there (a default value).
fn find_key_line(text: &str, header: &str, nth: usize, key: &str) -> Option<usize> {
    let lines: Vec<&str> = text.lines().collect();
    let header_line = lines
        .iter()
        .enumerate()
        .filter(|(_, line)| same_header(line, header))
        .nth(nth)
        .map(|(i, _)| i)?;
    let key_line = lines[header_line + 1..]
        .iter()
        .take_while(|line| !line.trim_start().starts_with('['))
        .position(|line| {
            line.trim_start()
                .strip_prefix(key)
                .is_some_and(|rest| rest.trim_start().starts_with('='))
        })
        .map(|offset| header_line + 1 + offset);
    Some(key_line.unwrap_or(header_line) + 1)
}

/// Whether `line` is the table header `header`, however TOML lets it be spelled: spaces
/// inside the brackets (`[[ sinks ]]`) and a comment after it.
fn same_header(line: &str, header: &str) -> bool {
    let code = line.split('#').next().unwrap_or_default();
    code.chars()
        .filter(|c| !c.is_whitespace())
        .eq(header.chars())
}

fn is_glob_ok(pattern: &str) -> Result<(), String> {
    glob::Pattern::new(pattern)
        .map(|_| ())
        .map_err(|e| format!("bad glob {pattern:?}: {e}"))
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
        let mut report = Report {
            text,
            problems: Vec::new(),
        };
        if let Some(host) = &self.agent.host_name {
            if host.trim().is_empty() {
                report.add("agent", "host_name", "must not be empty when set");
            }
        }

        if self.agent.state_dir.as_os_str().is_empty() {
            report.add("agent", "state_dir", "must not be empty");
        }

        let xid = &self.sources.xid;
        let valid_name =
            |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        match xid.tracepoint_name.split_once(':') {
            Some((category, name)) if valid_name(category) && valid_name(name) => {}
            _ => report.add(
                "sources.xid",
                "tracepoint_name",
                format!("{:?} is not `category:name`", xid.tracepoint_name),
            ),
        }
        for (key, value) in [
            ("dev", &xid.tracepoint_fields.dev),
            ("error_code", &xid.tracepoint_fields.error_code),
            ("msg", &xid.tracepoint_fields.msg),
        ] {
            if !valid_name(value) {
                report.add(
                    "sources.xid.tracepoint_fields",
                    key,
                    format!("{value:?} is not a field name"),
                );
            }
        }

        let driver = &self.sources.driver;
        if driver.functions.len() > 8 {
            report.add(
                "sources.driver",
                "functions",
                format!(
                    "{} functions; at most 8 can be timed",
                    driver.functions.len()
                ),
            );
        }
        if driver
            .functions
            .iter()
            .any(|f| f.split('|').any(|name| name.trim().is_empty()))
        {
            report.add("sources.driver", "functions", "an empty function name");
        }
        if driver.device_majors.len() > 8 {
            report.add("sources.driver", "device_majors", "at most 8 majors");
        }
        let cuda = &self.sources.cuda;
        if cuda.libraries.is_empty() || cuda.libraries.iter().any(|l| l.trim().is_empty()) {
            report.add(
                "sources.cuda",
                "libraries",
                "needs \"auto\" or one or more non-empty paths",
            );
        }
        if cuda.functions.is_empty() {
            report.add(
                "sources.cuda",
                "functions",
                "needs \"default\", names or globs",
            );
        }
        for pattern in cuda.functions.iter().chain(&cuda.exclude_functions) {
            if let Err(message) = is_glob_ok(pattern) {
                let key = if cuda.functions.contains(pattern) {
                    "functions"
                } else {
                    "exclude_functions"
                };
                report.add("sources.cuda", key, message);
            }
        }
        if !(1..=10_000).contains(&cuda.drain_interval_ms) {
            report.add(
                "sources.cuda",
                "drain_interval_ms",
                format!("{} is outside 1..=10000", cuda.drain_interval_ms),
            );
        }
        if !(1..=1024).contains(&cuda.ring_size_mib) || !cuda.ring_size_mib.is_power_of_two() {
            report.add(
                "sources.cuda",
                "ring_size_mib",
                format!("{} is not a power of two in 1..=1024", cuda.ring_size_mib),
            );
        }
        if !(1..=65_536).contains(&cuda.inflight_slots) || !cuda.inflight_slots.is_power_of_two() {
            report.add(
                "sources.cuda",
                "inflight_slots",
                format!("{} is not a power of two in 1..=65536", cuda.inflight_slots),
            );
        }

        for (key, value) in [
            ("max_events", self.batch.max_events as u64),
            ("max_bytes", self.batch.max_bytes as u64),
            ("timeout_ms", self.batch.timeout_ms),
        ] {
            if value == 0 {
                report.add("batch", key, "must be greater than 0");
            }
        }

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

        let mut parquet_roots = Vec::new();
        let mut names = Vec::new();
        for (index, entry) in self.sinks.iter().enumerate() {
            let options = &entry.options;
            if let Some(name) = &options.name {
                if name.trim().is_empty() || names.contains(&name) {
                    report.add_sink(
                        index,
                        "name",
                        format!("{name:?} is empty or used by another sink"),
                    );
                }
                names.push(name);
            }
            if options.kinds.is_empty() {
                report.add_sink(index, "kinds", "needs at least one of \"xid\", \"cuda\"");
            }
            if options.cuda_filter.is_some() && !options.kinds.contains(&EventKind::Cuda) {
                report.add_sink(
                    index,
                    "cuda_filter",
                    "set, but the sink does not take \"cuda\" events",
                );
            }
            if let Some(filter) = &options.cuda_filter {
                if !filter.all && !filter.failed && filter.slower_than_ns.is_none() {
                    report.add_sink(
                        index,
                        "cuda_filter",
                        "keeps nothing: set failed = true and/or slower_than_ns",
                    );
                }
            }
            if options.spool.max_size == 0 {
                report.add_sink(index, "spool", "max_size must be greater than 0");
            }
            if options.buffer.max_events == 0 || options.buffer.max_bytes == 0 {
                report.add_sink(
                    index,
                    "buffer",
                    "max_events and max_bytes must be greater than 0",
                );
            }
            match &entry.sink {
                SinkConfig::Blackhole(_) => {}
                SinkConfig::Jsonl(jsonl) => {
                    for (key, message) in jsonl.problems() {
                        report.add_sink(index, key, message);
                    }
                }
                SinkConfig::Otlp(otlp) => {
                    for (key, message) in otlp.problems() {
                        report.add_sink(index, &key, message);
                    }
                }
                SinkConfig::Kafka(kafka) => {
                    for (key, message) in kafka.problems() {
                        report.add_sink(index, &key, message);
                    }
                }
                SinkConfig::Parquet(parquet) => {
                    for (key, message) in parquet.problems() {
                        report.add_sink(index, key, message);
                    }
                    if parquet_roots.contains(&&parquet.path) {
                        report.add_sink(
                            index,
                            "path",
                            format!("{} is used by another parquet sink", parquet.path.display()),
                        );
                    }
                    parquet_roots.push(&parquet.path);
                }
            }
        }
        report.problems
    }
}
