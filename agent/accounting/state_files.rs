//! State files the agent found unusable at start and set aside (renamed, so that the next
//! start does not trip over them again): how many, by file and by reason. Rendered on
//! `/metrics` as `gpuship_state_files_set_aside_total{file, reason}` and kept in the run's
//! final accounting. Both label sets are fixed: every (file, reason) pair is always exposed.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

/// A state file the agent reads back at start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateFile {
    /// `<state_dir>/kmsg-cursor.json`.
    KmsgCursor,
}

impl StateFile {
    /// Every state file, in the order metrics list them.
    pub const ALL: [StateFile; 1] = [StateFile::KmsgCursor];

    /// The `file` label.
    pub const fn name(self) -> &'static str {
        match self {
            StateFile::KmsgCursor => "kmsg_cursor",
        }
    }
}

/// Why a state file was set aside.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetAsideReason {
    /// Not what the agent writes there (garbage, empty, another JSON shape, negative or
    /// fractional numbers).
    Unreadable,
    /// Larger than any file the agent writes there; not read.
    TooLarge,
    /// A directory, FIFO, socket, device or symlink where a regular file belongs.
    NotAFile,
    /// A regular file owned by another user.
    ForeignOwner,
    /// Names a position the kernel log has not reached (kmsg cursor only).
    AheadOfLog,
}

impl SetAsideReason {
    /// Every reason, in the order metrics list them.
    pub const ALL: [SetAsideReason; 5] = [
        SetAsideReason::Unreadable,
        SetAsideReason::TooLarge,
        SetAsideReason::NotAFile,
        SetAsideReason::ForeignOwner,
        SetAsideReason::AheadOfLog,
    ];

    /// The `reason` label.
    pub const fn name(self) -> &'static str {
        match self {
            SetAsideReason::Unreadable => "unreadable",
            SetAsideReason::TooLarge => "too_large",
            SetAsideReason::NotAFile => "not_a_file",
            SetAsideReason::ForeignOwner => "foreign_owner",
            SetAsideReason::AheadOfLog => "ahead_of_log",
        }
    }
}

/// The counters, a table indexed by file and reason.
#[derive(Debug, Default)]
pub struct StateFileCounters {
    set_aside: [[AtomicU64; SetAsideReason::ALL.len()]; StateFile::ALL.len()],
}

/// Set-aside counts by file label, then reason label (every pair present).
pub type StateFileSnapshot = BTreeMap<&'static str, BTreeMap<&'static str, u64>>;

impl StateFileCounters {
    /// `file` was set aside for `reason`.
    pub fn set_aside(&self, file: StateFile, reason: SetAsideReason) {
        self.set_aside[file as usize][reason as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// The counters now.
    pub fn snapshot(&self) -> StateFileSnapshot {
        StateFile::ALL
            .into_iter()
            .map(|file| {
                let reasons = SetAsideReason::ALL
                    .into_iter()
                    .map(|reason| {
                        let count = &self.set_aside[file as usize][reason as usize];
                        (reason.name(), count.load(Ordering::Relaxed))
                    })
                    .collect();
                (file.name(), reasons)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_pair_is_listed_and_only_its_own_counts() {
        let counters = StateFileCounters::default();
        counters.set_aside(StateFile::KmsgCursor, SetAsideReason::AheadOfLog);
        counters.set_aside(StateFile::KmsgCursor, SetAsideReason::AheadOfLog);
        counters.set_aside(StateFile::KmsgCursor, SetAsideReason::TooLarge);
        let snapshot = counters.snapshot();
        let cursor = &snapshot["kmsg_cursor"];
        assert_eq!(cursor.len(), SetAsideReason::ALL.len());
        assert_eq!(cursor["ahead_of_log"], 2);
        assert_eq!(cursor["too_large"], 1);
        assert_eq!(cursor["unreadable"], 0);
        assert_eq!(cursor["not_a_file"], 0);
        assert_eq!(cursor["foreign_owner"], 0);
    }
}
