//! `[sources.cuda]`: the CUDA source's settings, their defaults and their checks (the
//! configuration composes them in `[sources]` and reports their problems with lines).

use serde::Deserialize;

use crate::table_problems::TableProblems;

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

impl CudaSourceConfig {
    /// Every problem with the values, keys relative to `[sources.cuda]`.
    pub fn problems(&self) -> Vec<(String, String)> {
        let mut problems = TableProblems::default();
        if self.libraries.is_empty() && !self.discovers_libraries() {
            problems.add(
                "libraries",
                "needs \"auto\" or one or more paths while discover_libraries = false",
            );
        }
        if self.libraries.iter().any(|l| l.trim().is_empty()) {
            problems.add(
                "libraries",
                "an empty path; give \"auto\" or non-empty paths",
            );
        }
        if self.functions.is_empty() {
            problems.add("functions", "needs \"default\", names or globs");
        }
        let lists = [
            ("functions", &self.functions),
            ("exclude_functions", &self.exclude_functions),
            ("entry_only", &self.entry_only),
            ("stats_entry_only", &self.stats_entry_only),
            ("stats", &self.stats),
            ("hot_functions", &self.hot_functions),
        ];
        for (key, patterns) in lists {
            for pattern in patterns {
                if let Err(message) = is_glob_ok(pattern) {
                    problems.add(key, message);
                }
            }
        }
        if let Err(message) = parse_budget(&self.overhead_budget) {
            problems.add("overhead_budget", message);
        }
        let fraction = self.min_observed_fraction;
        if !(fraction > 0.0 && fraction <= 1.0) {
            problems.add(
                "min_observed_fraction",
                format!("{fraction} is not in (0, 1]"),
            );
        }
        problems.range("sampling_window_ms", self.sampling_window_ms, 1..=600_000);
        problems.range(
            "incident_full_probing_secs",
            self.incident_full_probing_secs,
            0..=86_400,
        );
        problems.range("stats_interval_secs", self.stats_interval_secs, 1..=3_600);
        problems.range("slow_call_ns", self.slow_call_ns, 0..=86_400_000_000_000);
        problems.range("stats_max_entries", self.stats_max_entries, 1..=1_048_576);
        let slots = self.flight_recorder_slots_per_cpu;
        if slots != 0 && (!slots.is_power_of_two() || !(64..=1 << 20).contains(&slots)) {
            problems.add(
                "flight_recorder_slots_per_cpu",
                format!("{slots} is neither 0 (off) nor a power of two in 64..=1048576"),
            );
        }
        problems.range("flight_recorder_secs", self.flight_recorder_secs, 1..=3_600);
        problems.range("drain_interval_ms", self.drain_interval_ms, 1..=10_000);
        problems.range("library_rescan_secs", self.library_rescan_secs, 1..=86_400);
        if !(1..=1024).contains(&self.ring_size_mib) || !self.ring_size_mib.is_power_of_two() {
            problems.add(
                "ring_size_mib",
                format!("{} is not a power of two in 1..=1024", self.ring_size_mib),
            );
        }
        if !(1..=65_536).contains(&self.inflight_slots) || !self.inflight_slots.is_power_of_two() {
            problems.add(
                "inflight_slots",
                format!("{} is not a power of two in 1..=65536", self.inflight_slots),
            );
        }
        problems.into_vec()
    }
}

impl CudaSourceConfig {
    /// What the operator named explicitly that this host lacks: a library path that is not a
    /// file (keys relative to `[sources.cuda]`). `"auto"` may find nothing: the agent says so
    /// and runs with the rest.
    pub fn host_problems(&self) -> Vec<(String, String)> {
        if !self.enabled {
            return Vec::new();
        }
        let mut problems = TableProblems::default();
        for (i, library) in self.libraries.iter().enumerate() {
            if library == "auto" || library.trim().is_empty() {
                continue;
            }
            if let Some(message) = library_problem(std::path::Path::new(library)) {
                problems.add(&format!("libraries[{i}]"), message);
            }
        }
        problems.into_vec()
    }
}

/// Why an explicitly configured library cannot be probed.
fn library_problem(path: &std::path::Path) -> Option<String> {
    let shown = path.display();
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_file() => None,
        Ok(_) => Some(format!("{shown} is not a file")),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Some(format!(
            "{shown} does not exist on this host (use \"auto\" to search the usual places, \
             or [sources.cuda] enabled = false)"
        )),
        Err(err) => Some(format!("{shown}: {err}")),
    }
}

fn is_glob_ok(pattern: &str) -> Result<(), String> {
    glob::Pattern::new(pattern)
        .map(|_| ())
        .map_err(|e| format!("bad glob {pattern:?}: {e}"))
}

impl Default for CudaSourceConfig {
    fn default() -> Self {
        toml::from_str("").expect("every field has a default")
    }
}

mod defaults;
