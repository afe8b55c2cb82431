//! Finding the CUDA libraries that processes actually map, so that the probes sit on the files
//! the workloads run, wherever their containers put them.
//!
//! - At start every process's `/proc/<pid>/maps` is read once ([`Discovery::scan_all`]).
//! - A process that opens a file named `libcuda.so*` is reported by the CUDA program's
//!   `openat` tracepoints (`bpf/cuda.bpf.c`); its maps are read at once and, while the library
//!   is not mapped yet, again after 25 ms, 50 ms, ... up to about 3 s ([`Discovery::opened`]).
//! - Every `library_rescan_secs` every process is read again: a safety net for what the
//!   tracepoint cannot see, and how libraries no process maps any more are found.
//!
//! One attach per file (device and inode as the kernel maps it, [`maps::FileKey`]), whatever
//! its path in each container. This module decides; the CUDA source attaches and detaches
//! ([`Action`]) and says how it went ([`Discovery::attached`]). No BPF here: the decisions are
//! tested on a `/proc` tree made of plain files.

pub mod identity;
pub mod maps;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub use maps::FileKey;

use crate::accounting::libraries::{LibraryOrigin, LibraryStatus};

/// How often a process that opened a libcuda is read again while it has not mapped it yet,
/// at first (doubling after each miss).
const FIRST_RETRY: Duration = Duration::from_millis(25);
/// Reads of such a process before it is given up on (25 ms doubling: about 3 s in all).
const MAX_TRIES: u32 = 8;
/// Library files attached at most (each attach pins kernel memory; a node has one or two
/// drivers, so more is a hostile or broken node).
pub const MAX_LIBRARIES: usize = 64;

/// What the CUDA source should do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Attach the probes to `reach` (a path to `key` in the agent's own mount namespace).
    Attach {
        /// The file.
        key: FileKey,
        /// Where the agent opens it.
        reach: PathBuf,
        /// Its path as the first process that maps it sees it.
        shown: PathBuf,
        /// When a process opened it (CLOCK_MONOTONIC ns), if the tracepoint saw it.
        opened_ns: Option<u64>,
        /// Processes that mapped it before this attach (their calls until now are not seen).
        mapped_before: usize,
    },
    /// Detach the probes of `key`: no process maps it any more.
    Detach {
        /// The file.
        key: FileKey,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Attach {
    /// Handed to the CUDA source, not answered yet.
    Attaching,
    Attached {
        symbols: usize,
    },
    Failed(String),
}

#[derive(Debug)]
struct File {
    origin: LibraryOrigin,
    shown: PathBuf,
    attach: Attach,
    /// Processes seen mapping it.
    mappers: BTreeSet<u32>,
}

#[derive(Debug, Clone, Copy)]
struct Pending {
    opened_ns: u64,
    next: Instant,
    tries: u32,
}

/// The discovery's state: every libcuda file known, who maps it, and whom to read again.
#[derive(Debug)]
pub struct Discovery {
    proc_dir: PathBuf,
    rescan: Duration,
    next_scan: Instant,
    files: BTreeMap<FileKey, File>,
    pending: HashMap<u32, Pending>,
    /// Files found but not attached because [`MAX_LIBRARIES`] are.
    pub refused: u64,
}

impl Discovery {
    /// A discovery over `proc_dir` that reads every process again each `rescan`.
    pub fn new(proc_dir: &Path, rescan: Duration, now: Instant) -> Self {
        Self {
            proc_dir: proc_dir.to_path_buf(),
            rescan,
            next_scan: now + rescan,
            files: BTreeMap::new(),
            pending: HashMap::new(),
            refused: 0,
        }
    }

    /// Records a library attached at start from the configuration (kept while the agent runs,
    /// whoever maps it).
    pub fn configured(&mut self, key: FileKey, path: &Path, symbols: usize) {
        self.files.insert(
            key,
            File {
                origin: LibraryOrigin::Configured,
                shown: path.to_path_buf(),
                attach: Attach::Attached { symbols },
                mappers: BTreeSet::new(),
            },
        );
    }

    /// Reads every process now: what to attach (files no attach has covered) and detach
    /// (discovered files no process maps). Also what [`Self::poll`] does when a rescan is due.
    pub fn scan_all(&mut self, now: Instant) -> Vec<Action> {
        self.next_scan = now + self.rescan;
        let mut seen: BTreeMap<FileKey, (BTreeSet<u32>, u32, maps::MappedLibrary)> =
            BTreeMap::new();
        for pid in maps::process_ids(&self.proc_dir) {
            let Ok(libraries) = maps::mapped_libraries(&self.proc_dir, pid) else {
                continue;
            };
            for library in libraries {
                let entry = seen
                    .entry(library.key)
                    .or_insert_with(|| (BTreeSet::new(), pid, library));
                entry.0.insert(pid);
            }
        }
        let mut actions = Vec::new();
        for (key, file) in self.files.iter_mut() {
            file.mappers = seen.get(key).map(|s| s.0.clone()).unwrap_or_default();
            let unused = file.mappers.is_empty() && file.origin == LibraryOrigin::Discovered;
            if unused && !matches!(file.attach, Attach::Failed(_)) {
                actions.push(Action::Detach { key: *key });
            }
        }
        self.files.retain(|_, file| {
            !(file.mappers.is_empty() && file.origin == LibraryOrigin::Discovered)
        });
        for (key, (mappers, pid, library)) in seen {
            let retry = self
                .files
                .get(&key)
                .is_some_and(|f| matches!(f.attach, Attach::Failed(_)));
            if self.files.contains_key(&key) && !retry {
                continue;
            }
            let opened_ns = mappers
                .iter()
                .filter_map(|p| self.pending.get(p))
                .map(|p| p.opened_ns)
                .min();
            actions.extend(self.found(pid, &library, mappers, opened_ns));
        }
        actions
    }

    /// A process opened a libcuda at `opened_ns` (CLOCK_MONOTONIC): read it now and again
    /// until it maps one.
    pub fn opened(&mut self, pid: u32, opened_ns: u64, now: Instant) {
        self.pending.entry(pid).or_insert(Pending {
            opened_ns,
            next: now,
            tries: 0,
        });
    }

    /// What is due at `now`: the processes to read again, and the rescan.
    pub fn poll(&mut self, now: Instant) -> Vec<Action> {
        let mut actions = Vec::new();
        let due: Vec<u32> = self
            .pending
            .iter()
            .filter(|(_, p)| p.next <= now)
            .map(|(pid, _)| *pid)
            .collect();
        for pid in due {
            actions.extend(self.read_pending(pid, now));
        }
        if now >= self.next_scan {
            actions.extend(self.scan_all(now));
        }
        actions
    }

    /// Whether anything is waiting to be read again soon.
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    fn read_pending(&mut self, pid: u32, now: Instant) -> Vec<Action> {
        let Some(pending) = self.pending.get(&pid).copied() else {
            return Vec::new();
        };
        let libraries = match maps::mapped_libraries(&self.proc_dir, pid) {
            Ok(libraries) => libraries,
            Err(_) => {
                // Ended (or cannot be read): nothing to attach for it.
                self.pending.remove(&pid);
                return Vec::new();
            }
        };
        if libraries.is_empty() {
            let tries = pending.tries + 1;
            if tries >= MAX_TRIES {
                self.pending.remove(&pid);
            } else if let Some(p) = self.pending.get_mut(&pid) {
                p.tries = tries;
                p.next = now + FIRST_RETRY * (1 << (tries - 1));
            }
            return Vec::new();
        }
        self.pending.remove(&pid);
        let mut actions = Vec::new();
        for library in libraries {
            // A file whose attach failed is tried again at the rescan, not per process.
            match self.files.get_mut(&library.key) {
                Some(file) => {
                    file.mappers.insert(pid);
                }
                None => {
                    let mappers = BTreeSet::from([pid]);
                    actions.extend(self.found(pid, &library, mappers, Some(pending.opened_ns)));
                }
            }
        }
        actions
    }

    /// A file seen mapped by `mappers` (`pid` among them) that no attach covers yet.
    fn found(
        &mut self,
        pid: u32,
        library: &maps::MappedLibrary,
        mappers: BTreeSet<u32>,
        opened_ns: Option<u64>,
    ) -> Option<Action> {
        let attached = self
            .files
            .values()
            .filter(|f| matches!(f.attach, Attach::Attached { .. } | Attach::Attaching))
            .count();
        let origin = LibraryOrigin::Discovered;
        let mapped_before = mappers.len();
        let mut file = File {
            origin,
            shown: library.path.clone(),
            attach: Attach::Attaching,
            mappers,
        };
        if attached >= MAX_LIBRARIES {
            self.refused += 1;
            file.attach = Attach::Failed(format!("{MAX_LIBRARIES} library files are attached"));
            self.files.insert(library.key, file);
            return None;
        }
        match maps::reachable_path(&self.proc_dir, pid, library) {
            Ok(reach) => {
                self.files.insert(library.key, file);
                Some(Action::Attach {
                    key: library.key,
                    reach,
                    shown: library.path.clone(),
                    opened_ns,
                    mapped_before,
                })
            }
            Err(reason) => {
                file.attach = Attach::Failed(format!("cannot reach it: {reason}"));
                self.files.insert(library.key, file);
                None
            }
        }
    }

    /// How attaching `key` went: its symbols, or why it failed (tried again at the next
    /// rescan).
    pub fn attached(&mut self, key: FileKey, result: Result<usize, String>) {
        if let Some(file) = self.files.get_mut(&key) {
            file.attach = match result {
                Ok(symbols) => Attach::Attached { symbols },
                Err(reason) => Attach::Failed(reason),
            };
        }
    }

    /// Every file known, for metrics, `/health` and logs.
    pub fn statuses(&self) -> Vec<LibraryStatus> {
        self.files
            .iter()
            .map(|(key, file)| LibraryStatus {
                file: key.to_string(),
                path: file.shown.to_string_lossy().into_owned(),
                origin: file.origin,
                symbols: match file.attach {
                    Attach::Attached { symbols } => Some(symbols),
                    Attach::Attaching | Attach::Failed(_) => None,
                },
                error: match &file.attach {
                    Attach::Failed(reason) => Some(reason.clone()),
                    Attach::Attached { .. } | Attach::Attaching => None,
                },
                processes: file.mappers.len() as u64,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests;
