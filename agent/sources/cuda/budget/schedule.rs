//! The overhead budget's decisions, free of BPF: from each process's trap counts and the
//! node's trap cost, which share of the time its hot functions stay probed, when its windows
//! open and close, when the hot links go per process and back, and how much of each process's
//! time was observed (the ledger `cuda_stats` fractions come from).
//!
//! - **System-wide** (the start, and whenever no process needs sampling): the hot functions are
//!   probed in every process by one link per library; every call is seen.
//! - **Per process**: as soon as one process's estimated cost passes the budget, every known
//!   process gets its own pid-filtered links, and the one over budget keeps its links only
//!   for a window (one tick) out of every `window / fraction`. After `QUIET_BEFORE_SYSTEM_WIDE`
//!   with no process over budget, the links go system-wide again.
//!
//! Cost of a process = (hot traps per second while probed × fraction + steady traps per second)
//! × trap cost. The fraction is the largest share that keeps it within the budget, never below
//! the floor (`min_observed_fraction`), and 1 for a process in an incident's full-probing time.
//!
//! [`process`] holds one process's state, [`steps`] what a tick takes and gives,
//! [`fractions`] the per-interval observed shares from the ledger.

mod fractions;
mod process;
mod steps;

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

pub use fractions::IntervalFractions;
use process::{ewma, Process};
pub use steps::{Mode, Reading, Step};

/// How long no process must need sampling before the hot links go system-wide again.
pub const QUIET_BEFORE_SYSTEM_WIDE: Duration = Duration::from_secs(60);
/// How often processes are checked for having exited.
const ALIVE_CHECK: Duration = Duration::from_secs(1);

/// The least time between two budget ticks for sampling windows of `window`. The consumer
/// flushes after every poll, hundreds of times a second under load, and every tick reads the
/// kernel's `process_traps` table, a walk over all of its buckets (2% of the agent's CPU at
/// 0.7 M rows/s before this limit); a window's edges stay within a tenth of it.
pub fn min_tick(window: Duration) -> Duration {
    (window / 10).min(Duration::from_millis(10))
}

/// What the budget knows of a sampled process (for the log).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Share {
    /// The share of the time its hot functions are probed.
    pub fraction: f64,
    /// Its hot traps per second while probed, and its other traps per second.
    pub hot_rate: f64,
    /// Its other traps per second.
    pub steady_rate: f64,
    /// What its probes would cost it if probed whole (share of its time).
    pub full_cost: f64,
}

/// The settings of the budget.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// Share of a process's time its probes may cost (0.01 for 1%).
    pub budget: f64,
    /// Least share of the time hot functions stay probed.
    pub floor: f64,
    /// How long a window lasts (the drain interval: one tick).
    pub window: Duration,
    /// How long an incident keeps its GPU's processes probed in full.
    pub incident_full: Duration,
}

/// The budget's state over every process it follows.
#[derive(Debug)]
pub struct Schedule {
    settings: Settings,
    trap_ns: f64,
    mode: Mode,
    processes: BTreeMap<u32, Process>,
    last_tick: Option<Instant>,
    last_read: Option<Instant>,
    last_alive_check: Option<Instant>,
    /// When a process last needed sampling.
    last_sampled: Instant,
    /// The final ledger of processes that exited since the last [`Schedule::take_ledger`]: their
    /// last interval's rows still need it.
    departed: HashMap<u32, (f64, f64)>,
    /// The processes without hot probes for part of the last tick's span, and that span.
    unprobed_last_tick: Vec<u32>,
    last_span: Duration,
}

impl Schedule {
    /// A schedule that starts system-wide, with the node's trap cost in nanoseconds.
    pub fn new(settings: Settings, trap_ns: f64, now: Instant) -> Self {
        Self {
            settings,
            trap_ns,
            mode: Mode::SystemWide,
            processes: BTreeMap::new(),
            last_tick: None,
            last_read: None,
            last_alive_check: None,
            last_sampled: now,
            departed: HashMap::new(),
            unprobed_last_tick: Vec::new(),
            last_span: Duration::ZERO,
        }
    }

    /// The processes whose hot functions were not probed for part of the last tick, and how
    /// long that tick was.
    pub fn unprobed_last_tick(&self) -> (&[u32], Duration) {
        (&self.unprobed_last_tick, self.last_span)
    }

    /// Where the hot links are.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The trap cost in use, in nanoseconds.
    pub fn trap_ns(&self) -> f64 {
        self.trap_ns
    }

    /// A new measurement of the trap cost.
    pub fn set_trap_ns(&mut self, trap_ns: f64) {
        self.trap_ns = trap_ns;
    }

    /// Processes whose hot functions are probed part of the time.
    pub fn sampled(&self) -> usize {
        self.processes.values().filter(|p| p.fraction < 1.0).count()
    }

    /// The processes probed part of the time, with what the budget knows of them.
    pub fn sampled_shares(&self) -> Vec<(u32, Share)> {
        let trap_s = self.trap_ns / 1e9;
        self.processes
            .iter()
            .filter(|(_, p)| p.fraction < 1.0)
            .map(|(pid, p)| {
                let hot_rate = p.hot_rate.unwrap_or(0.0);
                let steady_rate = p.steady_rate.unwrap_or(0.0);
                let share = Share {
                    fraction: p.fraction,
                    hot_rate,
                    steady_rate,
                    full_cost: (hot_rate + steady_rate) * trap_s,
                };
                (*pid, share)
            })
            .collect()
    }

    /// The share of the time `pid`'s hot functions are to be probed now (1.0 when unknown).
    pub fn fraction(&self, pid: u32) -> f64 {
        self.processes.get(&pid).map_or(1.0, |p| p.fraction)
    }

    /// Whether the caller should read the counters at this tick: at every tick, so that a
    /// busy process is sampled within two ticks of being seen (a reading costs a map lookup
    /// per process that made probed calls).
    pub fn wants_reading(&self, _now: Instant) -> bool {
        true
    }

    /// Probes `pids` in full until `now + incident_full`.
    pub fn boost(&mut self, pids: &[u32], now: Instant) {
        let until = now + self.settings.incident_full;
        for pid in pids {
            let process = self
                .processes
                .entry(*pid)
                .or_insert_with(|| Process::new(now));
            process.full_until = Some(until);
            process.fraction = 1.0;
        }
    }

    /// `pid`'s links of the window just opened took effect at `at` (after the attach call).
    pub fn attached(&mut self, pid: u32, at: Instant) {
        if let Some(process) = self.processes.get_mut(&pid) {
            process.attached_at = Some(at);
        }
    }

    /// `pid`'s links could not be attached: it is not probed.
    pub fn attach_failed(&mut self, pid: u32) {
        if let Some(process) = self.processes.get_mut(&pid) {
            process.probed = false;
            process.attached_at = None;
        }
    }

    /// Each followed process's nanoseconds followed and observed so far, with those that
    /// exited since the last call.
    pub fn take_ledger(&mut self) -> HashMap<u32, (f64, f64)> {
        let mut ledger = std::mem::take(&mut self.departed);
        ledger.extend(
            self.processes
                .iter()
                .map(|(pid, p)| (*pid, (p.tracked_ns, p.observed_ns))),
        );
        ledger
    }

    /// One tick: `readings` when the counters were read (see [`Self::wants_reading`]),
    /// `newcomers` that opened a CUDA library, `alive` to tell exited processes.
    pub fn tick(
        &mut self,
        now: Instant,
        readings: Option<&[Reading]>,
        newcomers: &[u32],
        alive: &dyn Fn(u32) -> bool,
    ) -> Vec<Step> {
        let mut steps = Vec::new();
        let span = self
            .last_tick
            .map_or(0.0, |at| now.duration_since(at).as_nanos() as f64);
        self.last_tick = Some(now);
        self.last_span = Duration::from_nanos(span as u64);
        let system_wide = self.mode == Mode::SystemWide;
        let trap_s = self.trap_ns / 1e9;
        let last_tick = now - Duration::from_nanos(span as u64);
        self.unprobed_last_tick.clear();
        for (pid, process) in &mut self.processes {
            let probed_ns = if system_wide {
                span
            } else if process.probed {
                // From the end of the attach, when it ended after the tick that asked for it.
                let from = process
                    .attached_at
                    .take()
                    .unwrap_or(last_tick)
                    .max(last_tick);
                now.duration_since(from).as_nanos() as f64
            } else {
                0.0
            };
            let unprobed_ns = (span - probed_ns).max(0.0);
            if unprobed_ns > 0.0 {
                self.unprobed_last_tick.push(*pid);
            }
            process.tracked_ns += probed_ns + unprobed_ns * process.speedup(trap_s);
            process.observed_ns += probed_ns;
            process.probed_last_s = probed_ns / 1e9;
        }
        if let Some(readings) = readings {
            let read_span = self
                .last_read
                .map_or(0.0, |at| now.duration_since(at).as_secs_f64());
            self.last_read = Some(now);
            for reading in readings {
                self.take_reading(reading, read_span, now, system_wide);
            }
        }
        for pid in newcomers {
            self.processes
                .entry(*pid)
                .or_insert_with(|| Process::new(now));
        }
        self.forget_exited(now, alive, &mut steps);
        let budget = self.settings.budget;
        let floor = self.settings.floor;
        let trap_s = self.trap_ns / 1e9;
        let mut any_sampled = false;
        for process in self.processes.values_mut() {
            process.fraction = if process.full_until.is_some_and(|until| now < until) {
                1.0
            } else {
                let hot_cost = process.hot_rate.unwrap_or(0.0) * trap_s;
                let steady_cost = process.steady_rate.unwrap_or(0.0) * trap_s;
                if hot_cost <= 0.0 || hot_cost + steady_cost <= budget {
                    1.0
                } else {
                    ((budget - steady_cost) / hot_cost).clamp(floor, 1.0)
                }
            };
            any_sampled |= process.fraction < 1.0;
        }
        if any_sampled {
            self.last_sampled = now;
        }
        match self.mode {
            Mode::SystemWide if any_sampled => {
                self.mode = Mode::PerProcess;
                for process in self.processes.values_mut() {
                    process.probed = true;
                    process.window_started = now;
                }
                steps.push(Step::SwitchToPerProcess(
                    self.processes.keys().copied().collect(),
                ));
            }
            Mode::SystemWide => {}
            Mode::PerProcess
                if !any_sampled
                    && now.duration_since(self.last_sampled) >= QUIET_BEFORE_SYSTEM_WIDE =>
            {
                self.mode = Mode::SystemWide;
                for process in self.processes.values_mut() {
                    process.probed = false;
                }
                steps.push(Step::SwitchToSystemWide);
            }
            Mode::PerProcess => self.open_and_close_windows(now, &mut steps),
        }
        steps
    }

    fn take_reading(&mut self, reading: &Reading, span: f64, now: Instant, system_wide: bool) {
        let process = self
            .processes
            .entry(reading.pid)
            .or_insert_with(|| Process::new(now));
        // Counters that went back belong to a new process with a reused pid.
        let hot = reading
            .hot
            .checked_sub(process.hot_seen)
            .unwrap_or(reading.hot);
        let steady = reading
            .steady
            .checked_sub(process.steady_seen)
            .unwrap_or(reading.steady);
        process.hot_seen = reading.hot;
        process.steady_seen = reading.steady;
        if span <= 0.0 {
            return;
        }
        process.steady_rate = Some(ewma(process.steady_rate, steady as f64 / span, span));
        // While per process, counters are read every tick: the rate is over the probed part.
        let probed_s = if system_wide {
            span
        } else {
            process.probed_last_s
        };
        if probed_s > 0.0 {
            process.hot_rate = Some(ewma(process.hot_rate, hot as f64 / probed_s, probed_s));
        } else if hot > 0 {
            // Calls of a window that closed while its links were going away: observed too,
            // for as long as they would have taken at the process's rate.
            if let Some(rate) = process.hot_rate.filter(|r| *r > 0.0) {
                let stray_ns = (hot as f64 / rate * 1e9).min(span * 1e9);
                process.observed_ns = (process.observed_ns + stray_ns).min(process.tracked_ns);
            }
        }
    }

    fn forget_exited(&mut self, now: Instant, alive: &dyn Fn(u32) -> bool, steps: &mut Vec<Step>) {
        if self
            .last_alive_check
            .is_some_and(|at| now.duration_since(at) < ALIVE_CHECK)
        {
            return;
        }
        self.last_alive_check = Some(now);
        let exited: Vec<u32> = self
            .processes
            .keys()
            .copied()
            .filter(|pid| !alive(*pid))
            .collect();
        for pid in exited {
            if let Some(process) = self.processes.remove(&pid) {
                self.departed
                    .insert(pid, (process.tracked_ns, process.observed_ns));
                if process.probed && self.mode == Mode::PerProcess {
                    steps.push(Step::Detach(pid));
                }
                steps.push(Step::Forget(pid));
            }
        }
    }

    fn open_and_close_windows(&mut self, now: Instant, steps: &mut Vec<Step>) {
        let window = self.settings.window;
        for (pid, process) in &mut self.processes {
            if process.probed {
                let open_for = now.duration_since(process.window_started);
                if process.fraction < 1.0 && open_for >= window {
                    process.probed = false;
                    let cycle = open_for.as_secs_f64() / process.fraction;
                    process.next_window = process.window_started + Duration::from_secs_f64(cycle);
                    steps.push(Step::Detach(*pid));
                }
            } else if process.fraction >= 1.0 || now >= process.next_window {
                process.probed = true;
                process.window_started = now;
                steps.push(Step::Attach(*pid));
            }
        }
    }
}

#[cfg(test)]
mod tests;
