//! The agent's configuration: one TOML file, every key documented in `config/gpuship.toml`.
//!
//! Parsing is strict (`deny_unknown_fields`: a typo is an error that names the key and its
//! line), and [`Config::validate`] is pure: it checks values without touching the system and
//! reports every problem at once, not just the first.

mod sinks;
mod sources;
mod validate;

use std::path::{Path, PathBuf};

use gpuship_sinks::parquet::ParquetSinkConfig;
use serde::Deserialize;

pub use sinks::{CudaFilter, SinkConfig, SinkEntry, SinkOptions};
pub use sources::{
    CudaSourceConfig, DriverSourceConfig, KmsgStart, SourcesConfig, TracepointFields,
    XidSourceConfig,
};
pub use validate::{ConfigError, Problem};

/// The whole file, as parsed before sinks are typed: each `[[sinks]]` table keeps its span so
/// that an error inside it can name its line (serde's tagged enums lose spans).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    #[serde(default)]
    agent: AgentConfig,
    #[serde(default)]
    sources: SourcesConfig,
    #[serde(default)]
    batch: BatchConfig,
    #[serde(default)]
    enrich: EnrichConfig,
    #[serde(default)]
    metrics: MetricsConfig,
    #[serde(default)]
    sinks: Vec<toml::Spanned<toml::Table>>,
}

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
    /// Seconds between the one-line progress summaries in the log (0 turns them off).
    #[serde(default = "defaults::stats_interval_secs")]
    pub stats_interval_secs: u64,
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

/// `[batch]`: when a batch of CUDA rows is handed to the sinks. XID rows never wait.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchConfig {
    /// Rows per batch at most.
    #[serde(default = "defaults::max_events")]
    pub max_events: usize,
    /// Approximate bytes per batch at most.
    #[serde(default = "defaults::max_bytes")]
    pub max_bytes: usize,
    /// Milliseconds a row waits at most before its batch is handed on.
    #[serde(default = "defaults::timeout_ms")]
    pub timeout_ms: u64,
}

/// `[metrics]`: Prometheus text on `/metrics`, readiness on `/health`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetricsConfig {
    /// Serve the endpoint.
    #[serde(default = "defaults::yes")]
    pub enabled: bool,
    /// Address to listen on (loopback by default; port 0 picks a free one, logged at start).
    #[serde(default = "defaults::metrics_address")]
    pub address: String,
}

/// `[enrich]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnrichConfig {
    /// Folder of per-GPU folders named by bus id, each with an `information` file.
    #[serde(default = "defaults::nvidia_proc_dir")]
    pub nvidia_proc_dir: PathBuf,
    /// Where the GPUs' device files (`nvidia<minor>`) are.
    #[serde(default = "defaults::dev_dir")]
    pub dev_dir: PathBuf,
    /// The proc filesystem (processes' open files and cgroups).
    #[serde(default = "defaults::proc_dir")]
    pub proc_dir: PathBuf,
    /// The kubelet's pod log folders (`<namespace>_<name>_<uid>`), which name the pods that
    /// processes' cgroups give the UID of.
    #[serde(default = "defaults::pod_log_dir")]
    pub pod_log_dir: PathBuf,
}

mod defaults {
    use std::path::PathBuf;

    pub fn yes() -> bool {
        true
    }
    pub fn reconcile_window_ms() -> u64 {
        1000
    }
    pub fn incident_window_secs() -> u64 {
        10
    }
    pub fn attribution_window_secs() -> u64 {
        10
    }
    pub fn dev_dir() -> PathBuf {
        PathBuf::from("/dev")
    }
    pub fn proc_dir() -> PathBuf {
        PathBuf::from("/proc")
    }
    pub fn pod_log_dir() -> PathBuf {
        PathBuf::from("/var/log/pods")
    }
    pub fn stats_interval_secs() -> u64 {
        10
    }
    pub fn state_dir() -> PathBuf {
        "./gpuship-state".into()
    }
    pub fn shutdown_timeout_secs() -> u64 {
        30
    }
    pub fn xid_tracepoint() -> String {
        "nvidia:nvidia_dev_xid".into()
    }
    pub fn field_dev() -> String {
        "dev".into()
    }
    pub fn field_error_code() -> String {
        "error_code".into()
    }
    pub fn field_msg() -> String {
        "msg".into()
    }
    pub fn kmsg_path() -> PathBuf {
        "/dev/kmsg".into()
    }
    pub fn libraries() -> Vec<String> {
        vec!["auto".into()]
    }
    pub fn functions() -> Vec<String> {
        vec!["default".into()]
    }
    pub fn exclude_functions() -> Vec<String> {
        [
            "cuGetProcAddress*",
            "cuCtxGetCurrent",
            "cuCtxGetDevice*",
            "cuDevicePrimaryCtxGetState",
            "cuDeviceGetAttribute",
            "cuGetErrorName",
            "cuGetErrorString",
            "cuGetExportTable",
            "cuOccupancy*",
        ]
        .map(String::from)
        .to_vec()
    }
    pub fn drain_interval_ms() -> u64 {
        100
    }
    pub fn ring_size_mib() -> u32 {
        8
    }
    pub fn inflight_slots() -> u32 {
        16_384
    }
    pub fn max_events() -> usize {
        8_192
    }
    pub fn max_bytes() -> usize {
        16 * 1024 * 1024
    }
    pub fn timeout_ms() -> u64 {
        1_000
    }
    pub fn metrics_address() -> String {
        "127.0.0.1:9464".into()
    }
    pub fn nvidia_proc_dir() -> PathBuf {
        "/proc/driver/nvidia/gpus".into()
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
default_from_serde!(
    MetricsConfig,
    AgentConfig,
    XidSourceConfig,
    TracepointFields,
    CudaSourceConfig,
    DriverSourceConfig,
    BatchConfig,
    EnrichConfig
);

/// Where the embedded default writes Parquet.
pub const DEFAULT_DATA_DIR: &str = "./gpuship-data";

impl Config {
    /// Parses and validates `text` (the contents of `origin`).
    pub fn from_toml(text: &str, origin: &Path) -> Result<Config, ConfigError> {
        let parse_error = |message: String| ConfigError::Parse {
            origin: origin.to_path_buf(),
            message,
        };
        let file: FileConfig = toml::from_str(text).map_err(|err| parse_error(err.to_string()))?;
        let mut sinks = Vec::with_capacity(file.sinks.len());
        for (index, table) in file.sinks.into_iter().enumerate() {
            let line = text[..table.span().start.min(text.len())]
                .matches('\n')
                .count()
                + 1;
            let sink = SinkEntry::from_table(table.into_inner())
                .map_err(|err| parse_error(format!("line {line}: sinks[{index}]: {err}")))?;
            sinks.push(sink);
        }
        let config = Config {
            agent: file.agent,
            sources: file.sources,
            batch: file.batch,
            enrich: file.enrich,
            metrics: file.metrics,
            sinks,
        };
        config.validate(text, origin)?;
        Ok(config)
    }

    /// Reads, parses and validates a file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            origin: path.to_path_buf(),
            source,
        })?;
        Self::from_toml(&text, path)
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
