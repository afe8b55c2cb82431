//! Loads `bpf/cuda.bpf.c` and attaches one uprobe and one uretprobe per planned symbol, on
//! the configured libraries and on those processes map ([`super::discovery`]); libraries
//! found later are attached and detached one by one ([`libraries`]); [`open`] loads the object.

mod kernel_support;
mod libraries;
mod open;
mod start;

use kernel_support::{repeat_lookups, repeat_lookups_possible, uprobe_multi_supported};
use libraries::attach_library_opens;
use open::{open_and_load, Programs};
use start::{find_libraries, plan, Origin};

use std::cell::RefCell;
use std::mem::MaybeUninit;
use std::path::Path;

use anyhow::Context;
use libbpf_rs::{Link, MapCore, MapHandle, OpenObject};

use super::attach;
use super::budget::unobserved::Unobserved;
use super::budget::HotProbes;
use super::config::CudaSourceConfig;
use super::discovery::{Discovery, FileKey};
use super::plan::{FunctionTable, PlannedProbe};
use super::probe_sites;
use super::recorder::RecorderSize;
use crate::bpf::cuda::types::sent_answer_key;
use crate::bpf::cuda::CudaSkel;
pub use crate::sources::source::ProcessFilter;

/// The loaded program, its links and the function table for decoding.
pub struct CudaProbes<'obj> {
    /// The skeleton (the consumer reads its ring and counters).
    pub skel: CudaSkel<'obj>,
    /// Names by function id.
    pub functions: FunctionTable,
    /// Number of symbols probed.
    pub probed_symbols: usize,
    /// Whether any probed symbol is in `stats` mode (then call_stats is drained).
    pub aggregates: bool,
    /// The function ids in `stats` mode.
    pub stats_function_ids: Vec<u32>,
    /// The flight recorder's size (off unless functions are in `stats` mode).
    pub recorder: RecorderSize,
    /// The libraries processes map, when `discover_libraries` is on.
    pub discovery: Option<Discovery>,
    /// What planning and attaching a library found later needs.
    later: LaterLibraries,
    /// The fork tracker and the library-open tracepoints.
    global_links: RefCell<Vec<Link>>,
    /// Each attached library's probes, by file.
    libraries: RefCell<Vec<(FileKey, attach::Links)>>,
    /// The overhead budget's hot links, once started ([`CudaProbes::start_budget`]).
    budget: RefCell<Option<HotProbes>>,
    /// The budget's share of a process's time, when one applies.
    budget_fraction: Option<f64>,
    /// Hot probes planned at start, by library, until the budget starts.
    pending_hot: Vec<(FileKey, std::path::PathBuf, Vec<PlannedProbe>, bool)>,
    /// When the budget left each process's hot functions unprobed (empty without a budget).
    pub unobserved: std::sync::Arc<Unobserved>,
}

/// The settings a library found after start is planned and attached with.
struct LaterLibraries {
    config: CudaSourceConfig,
    multi: bool,
    /// Whether the session program is loaded (lookups of a library may then use it).
    sessions: bool,
    kernel_release: Option<String>,
    /// Whether hot functions are marked for the budget.
    budget: bool,
}

impl CudaProbes<'_> {
    /// Detaches every probe; the ring can still be drained afterwards.
    ///
    /// Return probes go first: a uretprobe rides on the entry breakpoint, so while a symbol's
    /// return probe is still attached its calls would return without the entry program having
    /// run (unmatched returns). Entries stored after that have no return and are not emitted.
    pub fn detach(&self) {
        if let Some(budget) = self.budget.borrow_mut().as_mut() {
            budget.detach_all();
        }
        let mut libraries = self.libraries.borrow_mut();
        for (_, links) in libraries.iter_mut() {
            links.ret.clear();
        }
        for (_, links) in libraries.iter_mut() {
            links.entry.clear();
        }
        self.global_links.borrow_mut().clear();
    }

    /// Deletes the answers remembered for processes that no longer exist under `proc_dir`
    /// (`sent_answers`), so that a reused pid sends its own again; returns how many.
    pub fn forget_exited_answers(&self, proc_dir: &std::path::Path) -> usize {
        let map = &self.skel.maps.sent_answers;
        let keys: Vec<Vec<u8>> = map.keys().collect();
        let mut forgotten = 0;
        for raw_key in keys {
            let Ok(key) = bytemuck::try_pod_read_unaligned::<sent_answer_key>(&raw_key) else {
                continue;
            };
            if !super::process_exists(proc_dir, key.tgid) && map.delete(&raw_key).is_ok() {
                forgotten += 1;
            }
        }
        forgotten
    }

    /// Starts the overhead budget, when one applies: measures the trap cost and attaches the
    /// hot probes planned at start system-wide.
    pub fn start_budget(
        &mut self,
        proc_dir: &Path,
        accounting: &std::sync::Arc<crate::accounting::Accounting>,
    ) {
        let Some(fraction) = self.budget_fraction else {
            return;
        };
        let mut budget = HotProbes::new(
            &self.skel,
            &self.later.config,
            fraction,
            proc_dir,
            std::sync::Arc::clone(accounting),
            std::sync::Arc::clone(&self.unobserved),
        );
        for (key, path, probes, sessions) in std::mem::take(&mut self.pending_hot) {
            if let Err(err) = budget.add_library(&self.skel, key, &path, probes, sessions) {
                tracing::error!(
                    library = %path.display(),
                    error = format!("{err:#}"),
                    "attaching the hot CUDA functions failed: launches of this library are not recorded"
                );
            }
        }
        *self.budget.borrow_mut() = Some(budget);
    }

    /// The budget's tick (see [`HotProbes::tick`]); nothing without a budget.
    pub fn budget_tick(&self, now: std::time::Instant, newcomers: &[u32]) {
        if let Some(budget) = self.budget.borrow_mut().as_mut() {
            budget.tick(&self.skel, now, newcomers);
        }
    }

    /// Probes `pids` in full for the incident time (nothing without a budget).
    pub fn budget_boost(&self, pids: &[u32], now: std::time::Instant) {
        if let Some(budget) = self.budget.borrow_mut().as_mut() {
            budget.boost(pids, now);
        }
    }

    /// The observed share per process of the statistics interval that just closed, and which
    /// function ids are hot; None without a budget.
    pub fn budget_fractions(&self) -> Option<super::stats::Observed> {
        let mut budget = self.budget.borrow_mut();
        let budget = budget.as_mut()?;
        let by_pid = budget.interval_fractions();
        let hot: Vec<bool> = (0..self.functions.len() as u32)
            .map(|id| budget.is_hot(id))
            .collect();
        Some(super::stats::Observed { by_pid, hot })
    }

    /// A handle on the map of traced processes, for [`ProcessFilter::Selected`].
    pub fn traced_tgids(&self) -> anyhow::Result<MapHandle> {
        MapHandle::try_from(&self.skel.maps.traced_tgids)
            .context("duplicating the traced_tgids map handle")
    }
}

/// Resolves libraries (configured, and those processes under `proc_dir` map), plans and
/// attaches. `Ok(Err(reason))` when there is nothing to probe and nothing to wait for.
pub fn load<'obj>(
    storage: &'obj mut MaybeUninit<OpenObject>,
    config: &CudaSourceConfig,
    filter: ProcessFilter,
    proc_dir: &Path,
) -> anyhow::Result<Result<CudaProbes<'obj>, String>> {
    let found = match find_libraries(config, proc_dir) {
        Ok(found) => found,
        Err(reason) => return Ok(Err(reason)),
    };
    let (mut plan, unreadable) = match plan(config, &found.libraries)? {
        Ok(planned) => planned,
        Err(reason) => return Ok(Err(reason)),
    };
    let multi = config.uprobe_multi && uprobe_multi_supported();
    let budget_fraction = budget_applies(config, multi, filter);
    if budget_fraction.is_some() {
        plan.mark_hot(&config.hot_functions);
    }
    let placement = probe_sites::place_probes(&mut plan.probes);
    if !placement.single_stepped.is_empty() {
        tracing::warn!(
            symbols = placement.single_stepped.len(),
            first = ?placement.single_stepped.iter().take(16).collect::<Vec<_>>(),
            "these probes sit on an instruction the kernel single-steps: each call costs a second trap (6-10 us on a VM instead of about 1); see docs/performance.md"
        );
    }
    let recorder = RecorderSize::of(config)?;
    let release = crate::enrich::kernel_release();
    // The session program is loaded wherever the kernel and the setting allow it; each
    // library's lookups use it when its own plan allows (see `repeat_lookups`).
    let mut sessions = repeat_lookups_possible(config, multi, release.as_deref()).is_ok();
    let use_sessions = match repeat_lookups(config, multi, release.as_deref(), &plan) {
        Ok(()) => true,
        Err(reason) => {
            if plan.probes.iter().any(|p| p.repeats_at_entry) {
                tracing::info!(reason, "repeated kernel lookups keep their return probe");
            }
            false
        }
    };
    let discover = found.discovery.is_some();
    let load = |storage, sessions| {
        let programs = Programs {
            multi,
            sessions,
            discover,
            count_traps: budget_fraction.is_some(),
        };
        open_and_load(storage, config, filter, recorder, programs)
    };
    let skel = match load(storage, sessions) {
        Ok(skel) => skel,
        Err(err) if sessions => {
            // A kernel whose verifier rejects the session program still gets everything else.
            tracing::warn!(
                error = format!("{err:#}"),
                "loading the uprobe.session program failed; repeated kernel lookups keep their return probe"
            );
            sessions = false;
            // The failed attempt keeps `storage` borrowed for 'obj; the retry gets its own
            // (one pointer, once per run).
            load(Box::leak(Box::new(MaybeUninit::uninit())), false)?
        }
        Err(err) => return Err(err),
    };

    let mut global_links = Vec::new();
    if filter == ProcessFilter::Selected {
        global_links.push(
            skel.progs
                .handle_fork
                .attach()
                .context("attaching the fork tracker")?,
        );
    }
    let mut discovery = found.discovery;
    if discovery.is_some() {
        match attach_library_opens(&skel) {
            Ok(links) => global_links.extend(links),
            Err(err) => tracing::warn!(
                error = format!("{err:#}"),
                "the openat tracepoints cannot be attached: processes that map a new libcuda are found at the next rescan only (library_rescan_secs)"
            ),
        }
    }
    let (attached, in_sessions) =
        attach::attach_all(&skel, &plan.probes, multi, sessions && use_sessions)?;
    let mut libraries = Vec::new();
    let mut pending_hot = Vec::new();
    for library in &found.libraries {
        let hot: Vec<PlannedProbe> = plan
            .probes
            .iter()
            .filter(|p| p.hot && p.library == library.path)
            .cloned()
            .collect();
        if !hot.is_empty() {
            pending_hot.push((
                library.key,
                library.path.clone(),
                hot,
                sessions && use_sessions,
            ));
        }
    }
    // Hot lookups take the session program through the budget's links (`budget::attach_hot`).
    let in_sessions = in_sessions
        + if multi && sessions && use_sessions {
            pending_hot
                .iter()
                .flat_map(|(_, _, probes, _)| probes)
                .filter(|p| p.repeats_at_entry)
                .count()
        } else {
            0
        };
    for (path, links) in attached {
        let Some(library) = found.libraries.iter().find(|l| l.path == path) else {
            continue;
        };
        let symbols = plan.probes.iter().filter(|p| p.library == path).count();
        if let Some(discovery) = discovery.as_mut() {
            match library.origin {
                Origin::Configured => discovery.configured(library.key, &path, symbols),
                Origin::Discovered => discovery.attached(library.key, Ok(symbols)),
            }
        }
        libraries.push((library.key, links));
    }
    // Discovered files that got no probes: unreadable, or exporting nothing requested.
    if let Some(discovery) = discovery.as_mut() {
        for library in found
            .libraries
            .iter()
            .filter(|l| l.origin == Origin::Discovered)
        {
            if !libraries.iter().any(|(key, _)| *key == library.key) {
                let reason = unreadable
                    .iter()
                    .find(|(key, _)| *key == library.key)
                    .map(|(_, reason)| reason.clone())
                    .unwrap_or_else(|| {
                        format!(
                            "no requested function is exported by {}",
                            library.path.display()
                        )
                    });
                discovery.attached(library.key, Err(reason));
            }
        }
    }
    let aggregated = plan.probes.iter().filter(|p| p.stats).count();
    tracing::info!(
        libraries = ?found.libraries.iter().map(|l| &l.path).collect::<Vec<_>>(),
        symbols = plan.probes.len(),
        functions = plan.functions.len(),
        stats_symbols = aggregated,
        past_endbr64 = placement.past_endbr64,
        single_stepped = placement.single_stepped.len(),
        uprobe_multi = multi,
        repeat_lookups_at_entry = in_sessions,
        discover_libraries = discover,
        "CUDA uprobes attached"
    );
    Ok(Ok(CudaProbes {
        skel,
        probed_symbols: plan.probes.len(),
        // With discovery, a library found later may bring the `stats` functions.
        aggregates: aggregated > 0 || discover && !config.stats.is_empty(),
        stats_function_ids: plan
            .probes
            .iter()
            .filter(|p| p.stats)
            .map(|p| p.function_id())
            .collect(),
        functions: plan.functions,
        recorder,
        discovery,
        later: LaterLibraries {
            config: config.clone(),
            multi,
            sessions,
            kernel_release: release,
            budget: budget_fraction.is_some(),
        },
        global_links: RefCell::new(global_links),
        libraries: RefCell::new(libraries),
        budget: RefCell::new(None),
        budget_fraction,
        pending_hot,
        unobserved: std::sync::Arc::default(),
    }))
}

/// The overhead budget's share when one applies: configured, system-wide capture (`run --pid`
/// and `run -- COMMAND` stay exact), and uprobe_multi links (pid-filtered attach in one step).
fn budget_applies(config: &CudaSourceConfig, multi: bool, filter: ProcessFilter) -> Option<f64> {
    let fraction = config.budget_fraction()?;
    if filter == ProcessFilter::Selected {
        return None;
    }
    if !multi {
        tracing::warn!(
            "overhead_budget needs uprobe_multi links (Linux >= 6.6, uprobe_multi = true): every process's hot CUDA functions are probed in full"
        );
        return None;
    }
    Some(fraction)
}
