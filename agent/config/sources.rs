//! `[sources.*]`: what the agent captures (XIDs from the tracepoint and the kernel log, CUDA
//! calls, NVIDIA driver activity) and the settings of each source.

use std::path::PathBuf;

use serde::Deserialize;

use super::defaults;

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
    /// How many of the attributed process's last kernel launches an XID that points at a
    /// running kernel (31, 13, 43, ...) lists as suspects; 0 lists none.
    #[serde(default = "defaults::xid_suspects")]
    pub suspects: usize,
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
    /// Paths of libcuda.so.1, or `"auto"` to search the usual places of the agent's own
    /// filesystem; attached at start and kept for the whole run. `[]` with
    /// `discover_libraries` attaches only what processes map.
    #[serde(default = "defaults::libraries")]
    pub libraries: Vec<String>,
    /// Also attach every libcuda that a process maps, wherever its mount namespace has it (a
    /// container's own path, a job's own copy), reached through `/proc/<pid>/root`: every
    /// process's maps are read at start and every `library_rescan_secs`, and a process that
    /// opens a `libcuda.so*` file is read at once (an `openat` tracepoint). One attach per file;
    /// a discovered file no process maps any more is detached. Unset: on when `libraries`
    /// has `"auto"`, off when it names paths only (those files and no others).
    #[serde(default)]
    pub discover_libraries: Option<bool>,
    /// How often every process's maps are read again for libraries, in seconds (a safety net
    /// for the `openat` tracepoint, and how unused libraries are found).
    #[serde(default = "defaults::library_rescan_secs")]
    pub library_rescan_secs: u64,
    /// Functions to probe: exact names, globs (`"cu*"`), or `"default"` for the built-in set.
    #[serde(default = "defaults::functions")]
    pub functions: Vec<String>,
    /// Globs never probed when `"default"` or a glob in `functions` selects them (hot,
    /// uninteresting getters; `"cuLaunchKernel*"` here turns launch tracing off). A function
    /// named exactly in `functions` is always probed. Setting this replaces the built-in list.
    #[serde(default = "defaults::exclude_functions")]
    pub exclude_functions: Vec<String>,
    /// Functions (names or globs) recorded at entry only: one probe instead of two, so about
    /// half the cost per call, but no duration and no result (`result_name = NOT_CAPTURED`).
    /// For the hottest calls, e.g. `["cuLaunchKernel*"]`.
    #[serde(default)]
    pub entry_only: Vec<String>,
    /// Functions (names or globs) in `stats` mode: each call is added to per-interval
    /// statistics in the kernel (the `cuda_stats` table: calls, bytes, duration sum/min/max
    /// and histogram per process, function and result) instead of being a row; a call that
    /// fails or takes at least `slow_call_ns` is a row as well. The rest of the probed
    /// functions are rows. Ignored by `gpuship run --pid` and `gpuship run -- COMMAND`, which
    /// record every call of the traced processes.
    #[serde(default = "defaults::stats_functions")]
    pub stats: Vec<String>,
    /// Functions (names or globs) of `stats` that are probed at entry only while in `stats`
    /// mode: no return probe, so no duration and no CUresult (they are counted in `cuda_stats`
    /// with result NOT_CAPTURED; a failed launch is not seen, the next synchronisation reports
    /// a sticky error). The default, launches, is the measured decision of docs/performance.md:
    /// on the H100 the return probe costs a launch about 0.3 µs, which puts a 24,000
    /// launches/s training loop above 2% slowdown. Ignored with the rest of `stats` by `gpuship
    /// run --pid` and `gpuship run -- COMMAND`. `[]` keeps launches' returns.
    #[serde(default = "defaults::stats_entry_only")]
    pub stats_entry_only: Vec<String>,
    /// Length of a statistics interval, in seconds: one `cuda_stats` row per (process,
    /// function, result) that made calls in it.
    #[serde(default = "defaults::cuda_stats_interval_secs")]
    pub stats_interval_secs: u64,
    /// A call of a `stats` function taking at least this long (nanoseconds) is also a row;
    /// 0: only failed calls are.
    #[serde(default = "defaults::slow_call_ns")]
    pub slow_call_ns: u64,
    /// Most (process, function, result) entries the kernel keeps per interval (about 600
    /// bytes each, allocated when used); a call that finds the table full is counted as
    /// `stats_full`, not recorded.
    #[serde(default = "defaults::stats_max_entries")]
    pub stats_max_entries: u32,
    /// The flight recorder, for `stats` functions: the kernel keeps each CPU's latest calls
    /// that became no row (this many slots per CPU, a power of two; 144 bytes each, so the
    /// default 4,096 is 576 KiB per CPU; 0 turns it off). When an incident starts (an XID
    /// hitting a process, or a call of it failing with a sticky error such as
    /// CUDA_ERROR_ILLEGAL_ADDRESS) the process's calls of the `flight_recorder_secs` before
    /// are written as rows with the incident's id.
    #[serde(default = "defaults::flight_recorder_slots_per_cpu")]
    pub flight_recorder_slots_per_cpu: u32,
    /// How far back the flight recorder's rows of an incident go, in seconds (as far as the
    /// slots hold).
    #[serde(default = "defaults::flight_recorder_secs")]
    pub flight_recorder_secs: u64,
    /// Whether the flight recorder keeps a launch's stack-passed arguments (cuLaunchKernel's
    /// block z, shared memory and stream; cuLaunchKernelEx's whole CUlaunchConfig). Off by
    /// default: reading them is a user-memory read per recorded launch, about 160 ns on the
    /// benchmark VM, which alone is more than the rest of a `stats` call costs; recorded
    /// launches then have grid x/y/z and block x/y only (cuLaunchKernelEx: none). Rows of
    /// failed and slow calls always have them.
    #[serde(default)]
    pub flight_recorder_launch_details: bool,
    /// How often the CUDA ring is drained when no wakeup comes, in milliseconds.
    #[serde(default = "defaults::drain_interval_ms")]
    pub drain_interval_ms: u64,
    /// Size of the CUDA ring buffer in MiB (a power of two).
    #[serde(default = "defaults::ring_size_mib")]
    pub ring_size_mib: u32,
    /// Per-thread slots for calls between entry and return (a power of two, at most 65536;
    /// about 150 bytes of kernel memory each). A thread's id picks its slot; a call whose slot
    /// is taken (another thread's id maps to it, or a nested call) goes through a hash table,
    /// which costs more per call but loses nothing.
    #[serde(default = "defaults::inflight_slots")]
    pub inflight_slots: u32,
    /// Attach with one uprobe_multi link per library where the kernel has them (Linux >= 6.6);
    /// false attaches one probe per symbol (slower to attach and to detach).
    #[serde(default = "defaults::yes")]
    pub uprobe_multi: bool,
    /// A kernel lookup in `stats` mode (`cuKernelGetFunction`, which the CUDA runtime makes
    /// for the same kernels on every training step) that the calling thread already made in
    /// its current context is counted at entry, without its return probe (`cuda_stats`
    /// result NOT_CAPTURED), through a `uprobe.session` program (Linux >= 6.13, with
    /// `uprobe_multi`). On only while every exported function that can change a lookup's
    /// answer (context set, push, pop, create, destroy, primary-context release and reset,
    /// library and module unload) is probed, the ones that change every thread's answers with
    /// their return; any failed call makes every thread ask again. false: every lookup keeps
    /// its return.
    #[serde(default = "defaults::yes")]
    pub repeat_lookups_at_entry: bool,
    /// The overhead budget: the share of a process's time its probes may cost it, as a
    /// percentage (`"1%"`), or `"off"` for exact mode (every call of every process). With a
    /// budget, the `hot_functions` are attached per process (pid-filtered links, Linux >= 6.6
    /// with `uprobe_multi`) whenever some process's estimated cost (its traps per second times
    /// the trap cost measured on the node) passes the budget; such a process has its hot
    /// functions probed part of the time, and `cuda_stats` says which part and estimates the
    /// whole. Quiet processes keep every call. `gpuship run --pid` / `run -- COMMAND` are exact.
    #[serde(default = "defaults::overhead_budget")]
    pub overhead_budget: String,
    /// The functions (names or globs) the budget may probe part of the time: the ones that can
    /// trap thousands of times a second. The rest stays probed in every process.
    #[serde(default = "defaults::hot_functions")]
    pub hot_functions: Vec<String>,
    /// How long a sampled process's hot functions stay probed each time, in milliseconds
    /// (windows open and close on the drain timer, so at least `drain_interval_ms`). Each
    /// window attaches and detaches the process's links, which briefly takes its memory map's
    /// lock: longer windows, rarer, cost it less.
    #[serde(default = "defaults::sampling_window_ms")]
    pub sampling_window_ms: u64,
    /// The least share of the time a process's hot functions stay probed, however busy it is
    /// (0 < x <= 1). Never below one window per statistics interval, so that every interval of
    /// every process is represented (500 ms of 10 s: 0.05 with the defaults).
    #[serde(default = "defaults::min_observed_fraction")]
    pub min_observed_fraction: f64,
    /// After an incident (an XID on a GPU, or a sticky CUDA error), the processes on that GPU
    /// are probed in full for this many seconds, so that a recurrence is caught whole.
    #[serde(default = "defaults::incident_full_probing_secs")]
    pub incident_full_probing_secs: u64,
}

impl CudaSourceConfig {
    /// The overhead budget as a fraction of a process's time (`"1%"` -> 0.01); None for
    /// `"off"` or a value that does not parse (validation reports it).
    pub fn budget_fraction(&self) -> Option<f64> {
        parse_budget(&self.overhead_budget).ok().flatten()
    }

    /// Whether libraries that processes map are attached too (`discover_libraries`, or by
    /// default whether `libraries` has `"auto"`).
    pub fn discovers_libraries(&self) -> bool {
        self.discover_libraries
            .unwrap_or_else(|| self.libraries.iter().any(|l| l == "auto"))
    }
}

/// `overhead_budget`: `"off"` (None) or a percentage in (0, 100] such as `"1%"` or `"0.5%"`.
pub fn parse_budget(text: &str) -> Result<Option<f64>, String> {
    let text = text.trim();
    if text.eq_ignore_ascii_case("off") {
        return Ok(None);
    }
    let Some(number) = text.strip_suffix('%') else {
        return Err(format!(
            "{text:?} is neither \"off\" nor a percentage such as \"1%\""
        ));
    };
    match number.trim().parse::<f64>() {
        Ok(percent) if percent > 0.0 && percent <= 100.0 => Ok(Some(percent / 100.0)),
        _ => Err(format!("{text:?} is not a percentage in (0%, 100%]")),
    }
}
