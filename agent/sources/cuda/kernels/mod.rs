//! Which kernel each handle of each process is: learned from the calls that make kernel handles
//! (`cuLibraryGetKernel` and `cuModuleGetFunction` take the name; `cuKernelGetFunction` makes a
//! `CUfunction` of a named `CUkernel`), retired by the unloads (`cuLibraryUnload`,
//! `cuModuleUnload`), and looked up for every launch row.
//!
//! Handles are per process and the driver reuses them after an unload, so the table maps
//! (pid, handle) to a name and remembers which library, module or kernel each handle came
//! from. A handle made before the agent started was never announced: its launches are named
//! [`name::UNKNOWN`] and counted. The table holds at most `MAX_NAME_BYTES_TOTAL` of names; a
//! name learned beyond that is counted as dropped and its launches read `unknown`.

pub mod name;
pub mod rows;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

pub use name::KernelName;

/// Bound on the names kept, over all processes (each name counted once however many handles
/// share it). PyTorch with cuBLAS and cuDNN names a few thousand kernels of about 150 bytes.
pub const MAX_NAME_BYTES_TOTAL: usize = 16 * 1024 * 1024;

/// Bound on the handles kept, over all processes.
pub const MAX_HANDLES: usize = 262_144;

/// Distinct unknown handles logged (each once); the rest are counted only.
const MAX_LOGGED_UNKNOWN: usize = 64;

/// Handles retired by an unload (or made again) that are still remembered, newest last, so
/// that launches decoded after the fact (the flight recorder's, an XID's suspects) get the
/// name their handle had when they ran.
const MAX_RETIRED: usize = 1024;

#[derive(Debug, Clone)]
struct Known {
    name: Arc<KernelName>,
    /// The library, module or kernel the handle was made from (0 when not known).
    parent: u64,
    /// When the call that made it was entered (Unix ns).
    since_ns: i64,
}

/// A handle that had a name from `known.since_ns` until `until_ns`.
#[derive(Debug, Clone)]
struct Retired {
    pid: i32,
    handle: u64,
    known: Known,
    until_ns: i64,
}

/// What a launch's handle resolved to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup<'a> {
    /// An announced handle.
    Named(&'a KernelName),
    /// A handle never announced (made before the agent started, or its name was dropped).
    Unknown,
}

/// The kernel handles of every traced process.
#[derive(Debug, Default)]
pub struct KernelNames {
    handles: HashMap<(i32, u64), Known>,
    name_bytes: usize,
    /// Names not kept because a bound was reached.
    dropped: u64,
    logged_unknown: HashSet<(i32, u64)>,
    retired: std::collections::VecDeque<Retired>,
}

impl KernelNames {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// `cuLibraryGetKernel` / `cuModuleGetFunction`, entered at `since_ns`, made `handle` from
    /// `parent`, for the kernel `name`. Returns false when the name was dropped (a bound was
    /// reached).
    pub fn learned(
        &mut self,
        pid: i32,
        handle: u64,
        parent: u64,
        name: Arc<KernelName>,
        since_ns: i64,
    ) -> bool {
        if let Some(current) = self.handles.get(&(pid, handle)) {
            // Looked up again: the same answer changes nothing (and retires nothing).
            if current.name == name && current.parent == parent {
                return true;
            }
        }
        self.insert(
            pid,
            handle,
            Known {
                name,
                parent,
                since_ns,
            },
        )
    }

    /// `cuKernelGetFunction`, entered at `since_ns`, made `function` of `kernel`: the function
    /// has the kernel's name. False when the kernel was never announced (the function stays
    /// unknown too).
    pub fn function_of(&mut self, pid: i32, function: u64, kernel: u64, since_ns: i64) -> bool {
        let Some(known) = self.handles.get(&(pid, kernel)) else {
            return false;
        };
        let name = Arc::clone(&known.name);
        if let Some(current) = self.handles.get(&(pid, function)) {
            // The runtime asks again and again: the same answer changes nothing.
            if Arc::ptr_eq(&current.name, &name) && current.parent == kernel {
                return true;
            }
        }
        self.insert(
            pid,
            function,
            Known {
                name,
                parent: kernel,
                since_ns,
            },
        )
    }

    /// Adds a handle. Every handle, current or retired, is charged its name's bytes (a name
    /// two handles share is charged twice: the bound errs on the safe side, and never depends
    /// on who else holds the name).
    fn insert(&mut self, pid: i32, handle: u64, known: Known) -> bool {
        let new_bytes = known.name.heap_bytes();
        let replacing = self.handles.contains_key(&(pid, handle));
        let over = self.name_bytes + new_bytes > MAX_NAME_BYTES_TOTAL
            || !replacing && self.handles.len() >= MAX_HANDLES;
        if over {
            self.dropped += 1;
            // The handle names another kernel now: its old name must not stay current.
            if let Some(old) = self.handles.remove(&(pid, handle)) {
                self.retire(pid, handle, old, known.since_ns);
            }
            return false;
        }
        self.name_bytes += new_bytes;
        let since_ns = known.since_ns;
        if let Some(old) = self.handles.insert((pid, handle), known) {
            self.retire(pid, handle, old, since_ns);
        }
        true
    }

    /// Keeps `old` (the name `handle` had until `until_ns`) among the retired handles.
    fn retire(&mut self, pid: i32, handle: u64, old: Known, until_ns: i64) {
        if self.retired.len() == MAX_RETIRED {
            if let Some(oldest) = self.retired.pop_front() {
                self.release(oldest.known);
            }
        }
        self.retired.push_back(Retired {
            pid,
            handle,
            known: old,
            until_ns,
        });
    }

    /// Accounts for a name no longer held by `old`'s handle.
    fn release(&mut self, old: Known) {
        self.name_bytes = self.name_bytes.saturating_sub(old.name.heap_bytes());
    }

    /// An unload, entered at `at_ns`, dropped `parent` (a library or module): its kernels and
    /// their functions are retired, so a reused handle value is not named after the kernel
    /// that had it before (launches from before the unload keep their name, see
    /// [`KernelNames::get_at`]). Returns how many handles were retired.
    pub fn unloaded(&mut self, pid: i32, parent: u64, at_ns: i64) -> usize {
        let mut gone: HashSet<u64> = HashSet::new();
        gone.insert(parent);
        let before = self.handles.len();
        // Two generations: the library's kernels, then the functions made of those kernels.
        for _ in 0..2 {
            let removed: Vec<(u64, Known)> = self
                .handles
                .extract_if(|&(p, _), known| p == pid && gone.contains(&known.parent))
                .map(|((_, handle), known)| (handle, known))
                .collect();
            for (handle, known) in removed {
                gone.insert(handle);
                self.retire(pid, handle, known, at_ns);
            }
        }
        before - self.handles.len()
    }

    /// The name `handle` of `pid` had at `time_ns` (a launch's entry time): the current one if
    /// it was made by then, else a retired one that covered that time.
    pub fn get_at(&self, pid: i32, handle: u64, time_ns: i64) -> Option<Arc<KernelName>> {
        if let Some(known) = self.handles.get(&(pid, handle)) {
            if known.since_ns <= time_ns {
                return Some(Arc::clone(&known.name));
            }
        }
        self.retired
            .iter()
            .rev()
            .find(|r| {
                r.pid == pid
                    && r.handle == handle
                    && r.known.since_ns <= time_ns
                    && time_ns < r.until_ns
            })
            .map(|r| Arc::clone(&r.known.name))
    }

    /// The kernel a launch of `handle` by `pid` ran; an unknown handle is logged the first time
    /// (up to `MAX_LOGGED_UNKNOWN` handles).
    pub fn lookup(&mut self, pid: i32, handle: u64) -> Lookup<'_> {
        if let Some(known) = self.handles.get(&(pid, handle)) {
            return Lookup::Named(&known.name);
        }
        if self.logged_unknown.len() < MAX_LOGGED_UNKNOWN
            && self.logged_unknown.insert((pid, handle))
        {
            tracing::info!(
                pid,
                handle = %format!("{handle:#x}"),
                "launch of a kernel handle made before the agent started (or not kept): named \"unknown\", counted in gpuship_cuda_unknown_kernel_launches_total"
            );
        }
        Lookup::Unknown
    }

    /// The name of `handle` in `pid`, if announced (no logging: for reading the history).
    pub fn get(&self, pid: i32, handle: u64) -> Option<Arc<KernelName>> {
        self.handles
            .get(&(pid, handle))
            .map(|known| Arc::clone(&known.name))
    }

    /// The processes with known handles.
    pub fn pids(&self) -> Vec<i32> {
        let mut pids: Vec<i32> = self.handles.keys().map(|&(pid, _)| pid).collect();
        pids.sort_unstable();
        pids.dedup();
        pids
    }

    /// Forgets every handle of `pid`, current and retired.
    pub fn forget_process(&mut self, pid: i32) {
        let mut removed: Vec<Known> = self
            .handles
            .extract_if(|&(p, _), _| p == pid)
            .map(|(_, known)| known)
            .collect();
        let (gone, kept): (Vec<Retired>, Vec<Retired>) =
            self.retired.drain(..).partition(|r| r.pid == pid);
        self.retired = kept.into();
        removed.extend(gone.into_iter().map(|r| r.known));
        for known in removed {
            self.release(known);
        }
        self.logged_unknown.retain(|&(p, _)| p != pid);
    }

    /// Names not kept because a bound was reached.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Handles known.
    pub fn len(&self) -> usize {
        self.handles.len()
    }

    /// True when no handle is known.
    pub fn is_empty(&self) -> bool {
        self.handles.is_empty()
    }

    /// Bytes of names held.
    pub fn name_bytes(&self) -> usize {
        self.name_bytes
    }
}

#[cfg(test)]
mod tests;
