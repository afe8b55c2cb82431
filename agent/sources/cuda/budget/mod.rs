//! The overhead budget (`[sources.cuda] overhead_budget`): the hot CUDA functions (launches,
//! graph launches, async copies) trap thousands of times a second in a training loop, and no
//! BPF program can make a trap cheaper, so a process whose probes would cost it more than the
//! budget has its hot functions probed only part of the time.
//!
//! - [`trap_cost`]: the node's cost of one probed call, measured on the agent itself at start
//!   and every [`RECALIBRATE`].
//! - [`kernel`]: the hot mode and the trap counters in the kernel, links dropped off-thread.
//! - [`schedule`]: the decisions (which share of the time, when windows open and close,
//!   system-wide or per-process links, the ledger of observed time), free of BPF.
//! - This module carries them out on the hot links, reads the kernel's `process_traps`, and
//!   gives the statistics interval's observed fractions to `cuda_stats`.
//!
//! The hot probes of each library are attached either system-wide (one link set per library,
//! every process exact) or per process (pid-filtered links; a process without its links has no
//! breakpoint at all). The kernel records hot calls only through the links of the current mode
//! (`hot_mode`, `bpf/include/cuda_budget.h`), so a switch attaches the new set, flips the mode
//! and then drops the old set: nothing lost, nothing counted twice. Links are dropped on a
//! thread of their own, because a detach waits for a grace period.

mod kernel;
pub mod schedule;
pub mod trap_cost;
pub mod unobserved;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use libbpf_rs::MapCore;

use self::kernel::{attach_library, drop_later, read_traps, set_hot_mode};
use self::schedule::{min_tick, IntervalFractions, Mode, Schedule, Settings, Step};
use self::trap_cost::measure_trap_cost;
use super::attach::Links;
use super::config::CudaSourceConfig;
use super::discovery::FileKey;
use super::plan::PlannedProbe;
use crate::accounting::Accounting;
use crate::bpf::cuda::CudaSkel;

/// How often the sampled processes are logged.
const REPORT: Duration = Duration::from_secs(60);
/// How often the trap cost is measured again.
pub const RECALIBRATE: Duration = Duration::from_secs(600);

struct HotLibrary {
    key: FileKey,
    path: PathBuf,
    probes: Vec<PlannedProbe>,
    /// Its lookups' repeats are counted through the session program.
    sessions: bool,
    system_wide: Option<Links>,
    per_process: BTreeMap<u32, Links>,
}

/// The hot links and the budget's schedule.
pub struct HotProbes {
    schedule: Schedule,
    libraries: Vec<HotLibrary>,
    fractions: IntervalFractions,
    proc_dir: PathBuf,
    next_calibration: Instant,
    next_report: Instant,
    /// Function ids of hot probes, by id.
    hot_ids: Vec<bool>,
    accounting: Arc<Accounting>,
    /// Spans without hot probes, for incidents (shared with the launch history).
    unobserved: Arc<unobserved::Unobserved>,
    /// When the last tick ran, and the least time to the next ([`min_tick`]).
    last_tick: Option<Instant>,
    min_tick: Duration,
}

impl HotProbes {
    /// A budget over `skel`'s hot links, with the trap cost measured now.
    pub fn new(
        skel: &CudaSkel<'_>,
        config: &CudaSourceConfig,
        budget: f64,
        proc_dir: &Path,
        accounting: Arc<Accounting>,
        unobserved: Arc<unobserved::Unobserved>,
    ) -> Self {
        let now = Instant::now();
        let trap_ns = measure_trap_cost(skel);
        let window = Duration::from_millis(config.sampling_window_ms);
        let settings = Settings {
            budget,
            floor: least_observed(config, window),
            window,
            incident_full: Duration::from_secs(config.incident_full_probing_secs),
        };
        accounting.budget.active.store(true, Ordering::Relaxed);
        accounting
            .budget
            .trap_cost_ns
            .store(trap_ns as u64, Ordering::Relaxed);
        tracing::info!(
            budget_percent = budget * 100.0,
            trap_cost_ns = trap_ns,
            least_observed = settings.floor,
            window_ms = config.sampling_window_ms,
            "overhead budget on: hot CUDA functions are probed part of the time in processes whose cost would pass it"
        );
        Self {
            schedule: Schedule::new(settings, trap_ns, now),
            libraries: Vec::new(),
            fractions: IntervalFractions::default(),
            proc_dir: proc_dir.to_path_buf(),
            next_calibration: now + RECALIBRATE,
            next_report: now + REPORT,
            hot_ids: Vec::new(),
            accounting,
            unobserved,
            last_tick: None,
            min_tick: min_tick(window),
        }
    }

    /// Whether `function_id` is a hot function (its `cuda_stats` rows carry the fraction).
    pub fn is_hot(&self, function_id: u32) -> bool {
        self.hot_ids
            .get(function_id as usize)
            .copied()
            .unwrap_or(false)
    }

    /// Takes the hot probes of a library attached now, and attaches them as the current mode
    /// says (system-wide, or for every process followed).
    pub fn add_library(
        &mut self,
        skel: &CudaSkel<'_>,
        key: FileKey,
        path: &Path,
        probes: Vec<PlannedProbe>,
        sessions: bool,
    ) -> anyhow::Result<()> {
        if probes.is_empty() || self.libraries.iter().any(|l| l.key == key) {
            return Ok(());
        }
        for probe in &probes {
            let id = probe.function_id() as usize;
            if id >= self.hot_ids.len() {
                self.hot_ids.resize(id + 1, false);
            }
            self.hot_ids[id] = true;
        }
        let mut library = HotLibrary {
            key,
            path: path.to_path_buf(),
            probes,
            sessions,
            system_wide: None,
            per_process: BTreeMap::new(),
        };
        match self.schedule.mode() {
            Mode::SystemWide => library.system_wide = Some(attach_library(skel, &library, None)?),
            Mode::PerProcess => {
                let probed: Vec<u32> = self
                    .libraries
                    .first()
                    .map(|l| l.per_process.keys().copied().collect())
                    .unwrap_or_default();
                for pid in probed {
                    if let Ok(links) = attach_library(skel, &library, Some(pid)) {
                        library.per_process.insert(pid, links);
                    }
                }
            }
        }
        self.libraries.push(library);
        Ok(())
    }

    /// Drops the hot links of a library no process maps any more.
    pub fn remove_library(&mut self, key: FileKey) {
        let Some(index) = self.libraries.iter().position(|l| l.key == key) else {
            return;
        };
        let library = self.libraries.remove(index);
        let mut links: Vec<Links> = library.per_process.into_values().collect();
        links.extend(library.system_wide);
        drop_later(links);
    }

    /// Probes the processes of an incident in full for `incident_full_probing_secs`.
    pub fn boost(&mut self, pids: &[u32], now: Instant) {
        self.schedule.boost(pids, now);
    }

    /// The observed share of each followed process's time since the last call (the last
    /// statistics interval); a process not in it was observed whole.
    pub fn interval_fractions(&mut self) -> HashMap<u32, f64> {
        self.fractions.take(self.schedule.take_ledger())
    }

    /// One tick of the drain timer: reads the counters when due, lets the schedule decide,
    /// and carries out its steps. `newcomers`: processes that just opened a CUDA library.
    pub fn tick(&mut self, skel: &CudaSkel<'_>, now: Instant, newcomers: &[u32]) {
        if newcomers.is_empty()
            && self
                .last_tick
                .is_some_and(|at| now.saturating_duration_since(at) < self.min_tick)
        {
            return;
        }
        self.last_tick = Some(now);
        if now >= self.next_calibration {
            self.next_calibration = now + RECALIBRATE;
            let trap_ns = measure_trap_cost(skel);
            self.schedule.set_trap_ns(trap_ns);
            self.accounting
                .budget
                .trap_cost_ns
                .store(trap_ns as u64, Ordering::Relaxed);
        }
        let readings = self
            .schedule
            .wants_reading(now)
            .then(|| read_traps(&skel.maps.process_traps));
        let proc_dir = &self.proc_dir;
        let alive = |pid: u32| super::process_exists(proc_dir, pid);
        let steps = self
            .schedule
            .tick(now, readings.as_deref(), newcomers, &alive);
        let (unprobed, span) = self.schedule.unprobed_last_tick();
        if !unprobed.is_empty() {
            let until_ns = unix_now_ns();
            let from_ns = until_ns.saturating_sub(span.as_nanos().min(i64::MAX as u128) as i64);
            self.unobserved
                .record(unprobed.iter().copied(), from_ns, until_ns);
        }
        for step in steps {
            self.carry_out(skel, step);
        }
        if now >= self.next_report {
            self.next_report = now + REPORT;
            for (pid, share) in self.schedule.sampled_shares() {
                tracing::info!(
                    pid,
                    observed_share = share.fraction,
                    hot_traps_per_s = share.hot_rate,
                    other_traps_per_s = share.steady_rate,
                    cost_if_probed_whole_percent = share.full_cost * 100.0,
                    "a process is sampled under the overhead budget"
                );
            }
        }
        let counters = &self.accounting.budget;
        counters
            .sampled_processes
            .store(self.schedule.sampled() as u64, Ordering::Relaxed);
        counters
            .per_process
            .store(self.schedule.mode() == Mode::PerProcess, Ordering::Relaxed);
    }

    fn carry_out(&mut self, skel: &CudaSkel<'_>, step: Step) {
        let accounting = Arc::clone(&self.accounting);
        let counters = &accounting.budget;
        match step {
            Step::SwitchToPerProcess(pids) => {
                for pid in &pids {
                    self.attach_process(skel, *pid);
                }
                set_hot_mode(skel, Mode::PerProcess);
                let old: Vec<Links> = self
                    .libraries
                    .iter_mut()
                    .filter_map(|l| l.system_wide.take())
                    .collect();
                drop_later(old);
                counters.mode_switches.fetch_add(1, Ordering::Relaxed);
                tracing::info!(
                    processes = pids.len(),
                    "a process's probes would cost it more than the overhead budget: hot CUDA functions are now attached per process"
                );
            }
            Step::SwitchToSystemWide => {
                for library in &mut self.libraries {
                    match attach_library(skel, library, None) {
                        Ok(links) => library.system_wide = Some(links),
                        Err(err) => tracing::warn!(
                            library = %library.path.display(),
                            error = format!("{err:#}"),
                            "re-attaching the hot functions system-wide failed"
                        ),
                    }
                }
                set_hot_mode(skel, Mode::SystemWide);
                let old: Vec<Links> = self
                    .libraries
                    .iter_mut()
                    .flat_map(|l| std::mem::take(&mut l.per_process).into_values())
                    .collect();
                drop_later(old);
                counters.mode_switches.fetch_add(1, Ordering::Relaxed);
                tracing::info!("no process needs sampling any more: hot CUDA functions are attached system-wide again");
            }
            Step::Attach(pid) => {
                counters.windows.fetch_add(1, Ordering::Relaxed);
                let started = Instant::now();
                if self.attach_process(skel, pid) {
                    // The probes go live one by one during the attach (tens of ms for a
                    // library's hot symbols on a VM): its middle stands for all of them.
                    let took = started.elapsed();
                    tracing::debug!(pid, took_us = took.as_micros() as u64, "window opened");
                    self.schedule.attached(pid, started + took / 2);
                } else {
                    self.schedule.attach_failed(pid);
                }
            }
            Step::Detach(pid) => {
                let links: Vec<Links> = self
                    .libraries
                    .iter_mut()
                    .filter_map(|l| l.per_process.remove(&pid))
                    .collect();
                drop_later(links);
            }
            Step::Forget(pid) => {
                let _ = skel.maps.process_traps.delete(&pid.to_ne_bytes());
            }
        }
    }

    /// Attaches `pid`'s links on every library; true when it has links on at least one.
    fn attach_process(&mut self, skel: &CudaSkel<'_>, pid: u32) -> bool {
        for library in &mut self.libraries {
            if library.per_process.contains_key(&pid) {
                continue;
            }
            match attach_library(skel, library, Some(pid)) {
                Ok(links) => {
                    library.per_process.insert(pid, links);
                }
                Err(err) => {
                    self.accounting
                        .budget
                        .attach_failures
                        .fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(
                        pid,
                        error = format!("{err:#}"),
                        "per-process hot attach failed"
                    );
                }
            }
        }
        self.libraries
            .iter()
            .any(|l| l.per_process.contains_key(&pid))
    }

    /// Detaches every hot link now, returns first (the agent stops).
    pub fn detach_all(&mut self) {
        for library in &mut self.libraries {
            for links in library.per_process.values_mut() {
                links.ret.clear();
            }
            if let Some(links) = library.system_wide.as_mut() {
                links.ret.clear();
            }
        }
        for library in &mut self.libraries {
            library.per_process.clear();
            library.system_wide = None;
        }
    }
}

/// The least share of the time a sampled process is probed: `min_observed_fraction`, and
/// enough that every statistics interval holds a whole window wherever the windows fall
/// (a window opens at least every `interval - window`; one more window of slack covers the
/// drain timer's rounding).
fn least_observed(config: &CudaSourceConfig, window: Duration) -> f64 {
    let interval = config.stats_interval_secs.max(1) as f64;
    let window = window.as_secs_f64();
    let spacing = interval - 2.0 * window;
    let per_interval = if spacing > 0.0 { window / spacing } else { 1.0 };
    config.min_observed_fraction.max(per_interval).min(1.0)
}

/// Now, in nanoseconds since the Unix epoch (the XID and call rows' clock).
fn unix_now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests;
