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
use std::path::Path;
use std::sync::Arc;

pub use name::KernelName;

/// Bound on the names kept, over all processes (each name counted once however many handles
/// share it). PyTorch with cuBLAS and cuDNN names a few thousand kernels of about 150 bytes.
pub const MAX_NAME_BYTES_TOTAL: usize = 16 * 1024 * 1024;

/// Bound on the handles kept, over all processes.
pub const MAX_HANDLES: usize = 262_144;

/// Distinct unknown handles logged (each once); the rest are counted only.
const MAX_LOGGED_UNKNOWN: usize = 64;

#[derive(Debug, Clone)]
struct Known {
    name: Arc<KernelName>,
    /// The library, module or kernel the handle was made from (0 when not known).
    parent: u64,
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
}

impl KernelNames {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// `cuLibraryGetKernel` / `cuModuleGetFunction` made `handle` from `parent`, for the kernel
    /// `name`. Returns false when the name was dropped (a bound was reached).
    pub fn learned(&mut self, pid: i32, handle: u64, parent: u64, name: Arc<KernelName>) -> bool {
        self.insert(pid, handle, parent, name)
    }

    /// `cuKernelGetFunction` made `function` of `kernel`: the function has the kernel's name.
    /// False when the kernel was never announced (the function stays unknown too).
    pub fn function_of(&mut self, pid: i32, function: u64, kernel: u64) -> bool {
        let Some(known) = self.handles.get(&(pid, kernel)) else {
            return false;
        };
        let name = Arc::clone(&known.name);
        self.insert(pid, function, kernel, name)
    }

    fn insert(&mut self, pid: i32, handle: u64, parent: u64, name: Arc<KernelName>) -> bool {
        // A name another handle already holds costs nothing more.
        let new_bytes = if Arc::strong_count(&name) > 1 {
            0
        } else {
            name.heap_bytes()
        };
        let replacing = self.handles.contains_key(&(pid, handle));
        if !replacing
            && (self.handles.len() >= MAX_HANDLES
                || self.name_bytes + new_bytes > MAX_NAME_BYTES_TOTAL)
        {
            self.dropped += 1;
            return false;
        }
        self.name_bytes += new_bytes;
        if let Some(old) = self.handles.insert((pid, handle), Known { name, parent }) {
            self.release(&old);
        }
        true
    }

    /// Accounts for a name no longer held by `old`'s handle.
    fn release(&mut self, old: &Known) {
        if Arc::strong_count(&old.name) == 1 {
            self.name_bytes = self.name_bytes.saturating_sub(old.name.heap_bytes());
        }
    }

    /// An unload dropped `parent` (a library or module): its kernels and their functions are
    /// forgotten, so a reused handle value is not named after the kernel that had it before.
    /// Returns how many handles were forgotten.
    pub fn unloaded(&mut self, pid: i32, parent: u64) -> usize {
        let mut gone: HashSet<u64> = HashSet::new();
        gone.insert(parent);
        let before = self.handles.len();
        // Two generations: the library's kernels, then the functions made of those kernels.
        for _ in 0..2 {
            let mut removed = Vec::new();
            self.handles.retain(|&(p, handle), known| {
                let drop = p == pid && gone.contains(&known.parent);
                if drop {
                    removed.push((handle, Arc::clone(&known.name)));
                }
                !drop
            });
            for (handle, name) in removed {
                gone.insert(handle);
                if Arc::strong_count(&name) == 1 {
                    self.name_bytes = self.name_bytes.saturating_sub(name.heap_bytes());
                }
            }
        }
        before - self.handles.len()
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

    /// Forgets the handles of processes that no longer exist under `proc_dir`.
    pub fn forget_exited(&mut self, proc_dir: &Path) {
        let pids: HashSet<i32> = self.handles.keys().map(|&(pid, _)| pid).collect();
        for pid in pids {
            if !proc_dir.join(pid.to_string()).exists() {
                self.forget_process(pid);
            }
        }
    }

    fn forget_process(&mut self, pid: i32) {
        let mut removed = Vec::new();
        self.handles.retain(|&(p, _), known| {
            if p == pid {
                removed.push(Arc::clone(&known.name));
            }
            p != pid
        });
        for name in removed {
            if Arc::strong_count(&name) == 1 {
                self.name_bytes = self.name_bytes.saturating_sub(name.heap_bytes());
            }
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
