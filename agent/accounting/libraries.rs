//! Which libraries the CUDA source has attached, as the consumer thread last published them,
//! and how late its attaches came: what `/metrics`, `/health` and the logs say about capture
//! coverage (docs/operations.md, "Is every process captured?").

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Where a library came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LibraryOrigin {
    /// A `[sources.cuda] libraries` path (or `"auto"`'s search), attached for the whole run.
    Configured,
    /// Found mapped by a process; detached when no process maps it.
    Discovered,
}

impl LibraryOrigin {
    /// The metric label.
    pub const fn name(self) -> &'static str {
        match self {
            LibraryOrigin::Configured => "configured",
            LibraryOrigin::Discovered => "discovered",
        }
    }
}

/// One library file the CUDA source knows.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct LibraryStatus {
    /// `major:minor:inode` of the file (one attach per file).
    pub file: String,
    /// Its path, as the first process seen mapping it sees it (or as configured).
    pub path: String,
    /// Configured or discovered.
    pub origin: LibraryOrigin,
    /// Symbols probed when attached; `None` when not attached.
    pub symbols: Option<usize>,
    /// Why it is not attached.
    pub error: Option<String>,
    /// Processes seen mapping it at the last read.
    pub processes: u64,
}

/// The CUDA source's libraries and attach timing.
#[derive(Debug, Default)]
pub struct LibraryCounters {
    /// The statuses, replaced whenever they change.
    statuses: Mutex<Vec<LibraryStatus>>,
    /// Whether the CUDA source runs with discovery (else no library status means nothing).
    pub discovering: std::sync::atomic::AtomicBool,
    /// Processes that had mapped a library before its probes were attached (their calls
    /// until then were not seen).
    pub attached_late_processes: AtomicU64,
    /// Attaches timed from the process's open of the library, and their summed delay.
    pub timed_attaches: AtomicU64,
    /// Sum of those delays, in nanoseconds.
    pub attach_delay_ns_sum: AtomicU64,
    /// The longest of them, in nanoseconds.
    pub attach_delay_ns_max: AtomicU64,
    /// Attaches that failed (unreachable file, not ELF, kernel refusal).
    pub attach_failures: AtomicU64,
    /// Libraries detached because no process mapped them any more.
    pub detached: AtomicU64,
}

/// The libraries and attach counters at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct LibrarySnapshot {
    /// Whether the CUDA source discovers libraries.
    pub discovering: bool,
    /// Every library file known.
    pub libraries: Vec<LibraryStatus>,
    /// See [`LibraryCounters::attached_late_processes`].
    pub attached_late_processes: u64,
    /// See [`LibraryCounters::timed_attaches`].
    pub timed_attaches: u64,
    /// See [`LibraryCounters::attach_delay_ns_sum`].
    pub attach_delay_ns_sum: u64,
    /// See [`LibraryCounters::attach_delay_ns_max`].
    pub attach_delay_ns_max: u64,
    /// See [`LibraryCounters::attach_failures`].
    pub attach_failures: u64,
    /// See [`LibraryCounters::detached`].
    pub detached: u64,
}

impl LibraryCounters {
    /// Everything, read now.
    pub fn snapshot(&self) -> LibrarySnapshot {
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        LibrarySnapshot {
            discovering: self.discovering.load(Ordering::Relaxed),
            libraries: self.statuses(),
            attached_late_processes: load(&self.attached_late_processes),
            timed_attaches: load(&self.timed_attaches),
            attach_delay_ns_sum: load(&self.attach_delay_ns_sum),
            attach_delay_ns_max: load(&self.attach_delay_ns_max),
            attach_failures: load(&self.attach_failures),
            detached: load(&self.detached),
        }
    }

    /// Replaces the statuses.
    pub fn publish(&self, statuses: Vec<LibraryStatus>) {
        *self.statuses.lock().unwrap_or_else(|e| e.into_inner()) = statuses;
    }

    /// The statuses as last published.
    pub fn statuses(&self) -> Vec<LibraryStatus> {
        self.statuses
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Counts one attach that came `delay_ns` after the process opened the library.
    pub fn timed_attach(&self, delay_ns: u64) {
        self.timed_attaches.fetch_add(1, Ordering::Relaxed);
        self.attach_delay_ns_sum
            .fetch_add(delay_ns, Ordering::Relaxed);
        self.attach_delay_ns_max
            .fetch_max(delay_ns, Ordering::Relaxed);
    }

    /// Why capture is degraded, if it is: processes map a CUDA library that no attach covers.
    pub fn degraded(&self) -> Option<String> {
        if !self.discovering.load(Ordering::Relaxed) {
            return None;
        }
        let statuses = self.statuses();
        let unattached: Vec<&LibraryStatus> = statuses
            .iter()
            .filter(|s| s.error.is_some() && s.processes > 0)
            .collect();
        if unattached.is_empty() {
            return None;
        }
        let processes: u64 = unattached.iter().map(|s| s.processes).sum();
        Some(format!(
            "{processes} processes map {} CUDA libraries the agent could not attach ({})",
            unattached.len(),
            unattached
                .iter()
                .map(|s| s.error.as_deref().unwrap_or("unknown"))
                .collect::<Vec<_>>()
                .join("; ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(symbols: Option<usize>, processes: u64) -> LibraryStatus {
        LibraryStatus {
            file: "fd:1:10".into(),
            path: "/usr/lib/libcuda.so.1".into(),
            origin: LibraryOrigin::Discovered,
            symbols,
            error: symbols.is_none().then(|| "cannot reach it".to_string()),
            processes,
        }
    }

    #[test]
    fn degraded_only_while_processes_map_an_unattached_library() {
        let counters = LibraryCounters::default();
        counters.publish(vec![status(None, 3)]);
        assert_eq!(counters.degraded(), None, "not discovering");
        counters.discovering.store(true, Ordering::Relaxed);
        assert_eq!(
            counters.degraded().as_deref(),
            Some("3 processes map 1 CUDA libraries the agent could not attach (cannot reach it)")
        );
        counters.publish(vec![status(Some(160), 3), status(None, 0)]);
        assert_eq!(counters.degraded(), None);
    }

    #[test]
    fn attach_delays_sum_and_keep_their_maximum() {
        let counters = LibraryCounters::default();
        counters.timed_attach(5);
        counters.timed_attach(u64::MAX / 2);
        counters.timed_attach(7);
        assert_eq!(counters.timed_attaches.load(Ordering::Relaxed), 3);
        assert_eq!(
            counters.attach_delay_ns_max.load(Ordering::Relaxed),
            u64::MAX / 2
        );
        assert_eq!(
            counters.attach_delay_ns_sum.load(Ordering::Relaxed),
            u64::MAX / 2 + 12
        );
    }
}
