//! The agent's configuration: one TOML file, every key documented in `config/gpuship.toml`.
//!
//! Parsing is strict (`deny_unknown_fields`: a typo is an error that names the key and its
//! line), and [`Config::validate`] is pure: it checks values without touching the system and
//! reports every problem at once, not just the first.

mod sinks;
mod validate;

use std::path::{Path, PathBuf};

use gpuship_sinks::parquet::ParquetSinkConfig;
use serde::Deserialize;

pub use sinks::{CudaFilter, SinkConfig, SinkEntry, SinkOptions};
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

/// `[sources]`.
#[derive(Debug, Clone, PartialEq, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct SourcesConfig {
    /// `[sources.xid]`.
    #[serde(default)]
    pub xid: XidSourceConfig,
    /// `[sources.cuda]`.
    #[serde(default)]
    pub cuda: CudaSourceConfig,
    /// `[sources.driver]`.
    #[serde(default)]
    pub driver: DriverSourceConfig,
}

/// `[sources.driver]`: NVIDIA kernel-driver activity without kprobes.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DriverSourceConfig {
    /// ioctls on NVIDIA device files, from the syscall tracepoints.
    #[serde(default = "defaults::yes")]
    pub ioctl: bool,
    /// Character-device majors whose ioctls are kept; empty: every `nvidia*` major listed in
    /// /proc/devices (nvidia, nvidia-uvm, nvidia-caps, ...).
    #[serde(default)]
    pub device_majors: Vec<u32>,
    /// Driver functions timed with fentry/fexit (through the module's BTF), at most 8; `"a|b"`
    /// tries `a`, then `b` (names change between driver versions). Off by default: some run
    /// per interrupt.
    #[serde(default)]
    pub functions: Vec<String>,
}

/// Where in the kernel log reading starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum KmsgStart {
    /// Only lines logged after the agent starts (default: a restart does not repeat rows).
    #[default]
    End,
    /// Everything still in the kernel's log buffer.
    Beginning,
}

/// `[sources.xid]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct XidSourceConfig {
    /// Capture XIDs from the driver's tracepoint.
    #[serde(default = "defaults::yes")]
    pub tracepoint: bool,
    /// `category:name` of the tracepoint.
    #[serde(default = "defaults::xid_tracepoint")]
    pub tracepoint_name: String,
    /// Names of the record fields holding the bus id, the XID code and the message.
    #[serde(default)]
    pub tracepoint_fields: TracepointFields,
    /// Capture XIDs from `NVRM: Xid` lines in the kernel log.
    #[serde(default = "defaults::yes")]
    pub kmsg: bool,
    /// The kernel log device.
    #[serde(default = "defaults::kmsg_path")]
    pub kmsg_path: PathBuf,
    /// Where reading the kernel log starts.
    #[serde(default)]
    pub kmsg_start: KmsgStart,
    /// How long a report from one source waits for the same XID from the other.
    #[serde(default = "defaults::reconcile_window_ms")]
    pub reconcile_window_ms: u64,
    /// XIDs on one GPU closer than this belong to one incident.
    #[serde(default = "defaults::incident_window_secs")]
    pub incident_window_secs: u64,
    /// CUDA activity this recent attributes an XID to a process; failed calls this long after
    /// an XID are linked to its incident.
    #[serde(default = "defaults::attribution_window_secs")]
    pub attribution_window_secs: u64,
}

/// Field names of the XID tracepoint record (the driver's names by default).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TracepointFields {
    /// `__data_loc char[]` holding the PCI bus id.
    #[serde(default = "defaults::field_dev")]
    pub dev: String,
    /// `u32` XID code.
    #[serde(default = "defaults::field_error_code")]
    pub error_code: String,
    /// `__data_loc char[]` message.
    #[serde(default = "defaults::field_msg")]
    pub msg: String,
}

/// `[sources.cuda]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CudaSourceConfig {
    /// Trace CUDA driver API calls.
    #[serde(default = "defaults::yes")]
    pub enabled: bool,
    /// Paths of libcuda.so.1, or `"auto"` to search the usual places.
    #[serde(default = "defaults::libraries")]
    pub libraries: Vec<String>,
    /// Functions to probe: exact names, globs (`"cu*"`), or `"default"` for the built-in set.
    #[serde(default = "defaults::functions")]
    pub functions: Vec<String>,
    /// Globs never probed when a glob in `functions` matches them (hot, uninteresting getters).
    #[serde(default = "defaults::exclude_functions")]
    pub exclude_functions: Vec<String>,
    /// Functions (names or globs) recorded at entry only: one probe instead of two, so about
    /// half the cost per call, but no duration and no result (`result_name = NOT_CAPTURED`).
    /// For the hottest calls, e.g. `["cuLaunchKernel*"]`.
    #[serde(default)]
    pub entry_only: Vec<String>,
    /// How often the CUDA ring is drained when no wakeup comes, in milliseconds.
    #[serde(default = "defaults::drain_interval_ms")]
    pub drain_interval_ms: u64,
    /// Size of the CUDA ring buffer in MiB (a power of two).
    #[serde(default = "defaults::ring_size_mib")]
    pub ring_size_mib: u32,
    /// Attach with one uprobe_multi link per library where the kernel has them (Linux >= 6.6);
    /// false attaches one probe per symbol (slower to attach and to detach).
    #[serde(default = "defaults::yes")]
    pub uprobe_multi: bool,
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
mod tests;
