//! What the CUDA source's overhead budget is doing, as the consumer thread last set it: the trap
//! cost it measured, how many processes it samples, and how often it switched links (what
//! `/metrics` says about the budget; docs/performance.md, "The overhead budget").

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// The budget's gauges and counters.
#[derive(Debug, Default)]
pub struct BudgetCounters {
    /// Whether a budget applies (else the other values mean nothing).
    pub active: AtomicBool,
    /// The cost of one probed call measured on the node, in nanoseconds.
    pub trap_cost_ns: AtomicU64,
    /// Processes whose hot functions are probed part of the time now.
    pub sampled_processes: AtomicU64,
    /// Whether the hot links are per process (1) or system-wide (0).
    pub per_process: AtomicBool,
    /// Per-process windows opened (a pid-filtered attach each).
    pub windows: AtomicU64,
    /// Switches between system-wide and per-process links.
    pub mode_switches: AtomicU64,
    /// Attaches of per-process links that failed (the process exited meanwhile, mostly).
    pub attach_failures: AtomicU64,
}

/// The budget at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct BudgetSnapshot {
    /// See [`BudgetCounters::active`].
    pub active: bool,
    /// See [`BudgetCounters::trap_cost_ns`].
    pub trap_cost_ns: u64,
    /// See [`BudgetCounters::sampled_processes`].
    pub sampled_processes: u64,
    /// See [`BudgetCounters::per_process`].
    pub per_process: bool,
    /// See [`BudgetCounters::windows`].
    pub windows: u64,
    /// See [`BudgetCounters::mode_switches`].
    pub mode_switches: u64,
    /// See [`BudgetCounters::attach_failures`].
    pub attach_failures: u64,
}

impl BudgetCounters {
    /// Everything, read now.
    pub fn snapshot(&self) -> BudgetSnapshot {
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        BudgetSnapshot {
            active: self.active.load(Ordering::Relaxed),
            trap_cost_ns: load(&self.trap_cost_ns),
            sampled_processes: load(&self.sampled_processes),
            per_process: self.per_process.load(Ordering::Relaxed),
            windows: load(&self.windows),
            mode_switches: load(&self.mode_switches),
            attach_failures: load(&self.attach_failures),
        }
    }
}
