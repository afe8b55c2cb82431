//! What the budget's schedule knows of one process: its trap counts and rates, its share of
//! probed time and windows, and the time followed and observed (the ledger).

use std::time::Instant;

/// The largest share of a probed process's time taken as spent in traps (a measurement above it
/// is noise: such a process would make no progress).
const MAX_TRAPPED_SHARE: f64 = 0.99;
/// Rates are averaged over about this long (an exponential average weighted by time), so a
/// burst within one tick does not count as a busy process.
const RATE_HORIZON_S: f64 = 2.0;

/// One process the budget follows.
#[derive(Debug, Clone)]
pub(super) struct Process {
    pub(super) hot_seen: u64,
    pub(super) steady_seen: u64,
    /// Hot traps per second while probed; None until measured.
    pub(super) hot_rate: Option<f64>,
    pub(super) steady_rate: Option<f64>,
    pub(super) fraction: f64,
    /// Its per-process links are attached (per-process mode only).
    pub(super) probed: bool,
    pub(super) window_started: Instant,
    /// When its links actually took effect in the current window (the attach returned),
    /// if later than the tick that opened it.
    pub(super) attached_at: Option<Instant>,
    /// Seconds of the last tick's span in which it was probed (its hot rate's denominator).
    pub(super) probed_last_s: f64,
    pub(super) next_window: Instant,
    pub(super) full_until: Option<Instant>,
    /// Nanoseconds followed, weighted by how fast the process calls in them (a span without
    /// probes counts [`Process::speedup`] times: the process is faster without its traps),
    /// and of those observed (hot functions probed, weight 1). Their ratio is the share of
    /// the process's hot calls that were observed.
    pub(super) tracked_ns: f64,
    pub(super) observed_ns: f64,
}

impl Process {
    /// How much faster the process makes hot calls without its hot probes than with them:
    /// while probed, a share `c` of its time goes to their traps (hot rate × trap cost), time
    /// it spends on its own work once they are gone.
    pub(super) fn speedup(&self, trap_s: f64) -> f64 {
        let trapped = (self.hot_rate.unwrap_or(0.0) * trap_s).clamp(0.0, MAX_TRAPPED_SHARE);
        1.0 / (1.0 - trapped)
    }

    pub(super) fn new(now: Instant) -> Self {
        Self {
            hot_seen: 0,
            steady_seen: 0,
            hot_rate: None,
            steady_rate: None,
            fraction: 1.0,
            probed: false,
            window_started: now,
            attached_at: None,
            probed_last_s: 0.0,
            next_window: now,
            full_until: None,
            tracked_ns: 0.0,
            observed_ns: 0.0,
        }
    }
}

/// The average rate after `measured` over `span_s` seconds. A process's rate starts at zero
/// (before it was seen it made no calls), so a burst of calls in one tick, a hundred times
/// a second's rate, does not make a quiet process look busy.
pub(super) fn ewma(previous: Option<f64>, measured: f64, span_s: f64) -> f64 {
    let previous = previous.unwrap_or(0.0);
    let weight = 1.0 - (-span_s / RATE_HORIZON_S).exp();
    previous + weight * (measured - previous)
}
