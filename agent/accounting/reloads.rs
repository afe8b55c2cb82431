//! What became of the configuration reloads (SIGHUP): how many were applied and rejected,
//! whether the last one worked and when the configuration last changed, and the capture gap
//! of the last reload that restarted the sources. Rendered on `/metrics` as the
//! `gpuship_config_*` families and kept in the run's final accounting.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;

/// The reload counters.
#[derive(Debug)]
pub struct ReloadCounters {
    applied: AtomicU64,
    rejected: AtomicU64,
    last_succeeded: AtomicBool,
    /// When a configuration was last loaded successfully (the start counts), Unix ms.
    last_success_unix_ms: AtomicU64,
    /// Probes detached to probes attached again, of the last reload that restarted sources.
    last_capture_gap_ns: AtomicU64,
}

impl Default for ReloadCounters {
    /// The configuration the agent started with is the last successful load.
    fn default() -> Self {
        Self {
            applied: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
            last_succeeded: AtomicBool::new(true),
            last_success_unix_ms: AtomicU64::new(unix_ms(SystemTime::now())),
            last_capture_gap_ns: AtomicU64::new(0),
        }
    }
}

/// [`ReloadCounters`] read once.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct ReloadSnapshot {
    /// Reloads applied (a file unchanged since the last load included).
    pub applied: u64,
    /// Reloads rejected: the agent kept the configuration it had.
    pub rejected: u64,
    /// Whether the last reload was applied (true before any).
    pub last_succeeded: bool,
    /// When a configuration was last loaded successfully (the start counts), Unix ms.
    pub last_success_unix_ms: u64,
    /// The capture gap of the last reload that restarted the sources, in nanoseconds (0: none
    /// did).
    pub last_capture_gap_ns: u64,
}

fn unix_ms(time: SystemTime) -> u64 {
    let since = time.duration_since(UNIX_EPOCH).unwrap_or_default();
    u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
}

impl ReloadCounters {
    /// A reload was applied, `now`; `gap` when it restarted the sources.
    pub fn applied(&self, now: SystemTime, gap: Option<Duration>) {
        if let Some(gap) = gap {
            let nanos = u64::try_from(gap.as_nanos()).unwrap_or(u64::MAX);
            self.last_capture_gap_ns.store(nanos, Ordering::Relaxed);
        }
        self.last_success_unix_ms
            .store(unix_ms(now), Ordering::Relaxed);
        self.last_succeeded.store(true, Ordering::Relaxed);
        self.applied.fetch_add(1, Ordering::Relaxed);
    }

    /// A reload was rejected.
    pub fn rejected(&self) {
        self.last_succeeded.store(false, Ordering::Relaxed);
        self.rejected.fetch_add(1, Ordering::Relaxed);
    }

    /// The counters now.
    pub fn snapshot(&self) -> ReloadSnapshot {
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        ReloadSnapshot {
            applied: load(&self.applied),
            rejected: load(&self.rejected),
            last_succeeded: self.last_succeeded.load(Ordering::Relaxed),
            last_success_unix_ms: load(&self.last_success_unix_ms),
            last_capture_gap_ns: load(&self.last_capture_gap_ns),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_outcome_and_the_counts_follow_the_reloads() {
        let counters = ReloadCounters::default();
        let start = counters.snapshot();
        assert!(start.last_succeeded);
        assert_eq!((start.applied, start.rejected), (0, 0));
        counters.rejected();
        let rejected = counters.snapshot();
        assert!(!rejected.last_succeeded);
        assert_eq!(rejected.last_success_unix_ms, start.last_success_unix_ms);
        let later = UNIX_EPOCH + Duration::from_millis(start.last_success_unix_ms + 5_000);
        counters.applied(later, Some(Duration::from_millis(250)));
        let applied = counters.snapshot();
        assert!(applied.last_succeeded);
        assert_eq!((applied.applied, applied.rejected), (1, 1));
        assert_eq!(
            applied.last_success_unix_ms,
            start.last_success_unix_ms + 5_000
        );
        assert_eq!(applied.last_capture_gap_ns, 250_000_000);
        // A reload that restarts no source keeps the last gap.
        counters.applied(later, None);
        assert_eq!(counters.snapshot().last_capture_gap_ns, 250_000_000);
    }
}
