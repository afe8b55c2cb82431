//! The memory each process holds, per GPU and kind, from the rows of its allocations and frees:
//! classic (`cuMemAlloc_v2`, pitched, managed, pinned host), stream-ordered pools
//! (`cuMemAllocAsync`, `cuMemAllocFromPoolAsync`, freed by `cuMemFreeAsync` or `cuMemFree_v2`)
//! and the virtual-memory API, where physical memory (`cuMemCreate`) is held until it is both
//! released (`cuMemRelease`) and unmapped everywhere (`cuMemUnmap`), so a handle released while
//! mapped still counts.
//!
//! Only what the agent saw is counted, never a guess: a process whose `cuInit` the agent did not
//! see may hold memory from before (`seen_from_start = false` on its rows); a free of a pointer
//! never seen allocated is counted, not subtracted. Pitched allocations have no byte count (the
//! probe does not read the pitch): they are counted as allocations with 0 bytes known.

use std::collections::BTreeMap;
use std::sync::Arc;

use rustc_hash::FxHashMap;

use gpuship_sinks::schema::{CallGpu, CudaRow, HeldMemory, LargeAllocation};

use super::roles::{MemoryKind, MemoryRole};
pub use held::Held;
use held::{GpuSlot, HeldByGpu};

/// Outstanding allocations, physical handles and mappings kept over all processes; beyond, new
/// ones are not followed (counted in `untracked`, and their process's rows say incomplete).
const MAX_ENTRIES: usize = 1 << 20;

/// Largest outstanding allocations an out-of-memory row lists.
pub const LARGEST_LISTED: usize = 8;

/// `CUDA_ERROR_OUT_OF_MEMORY`.
const OUT_OF_MEMORY: u32 = 2;

/// The GPU memory is held on (None: not known).
pub type GpuKey = Option<Arc<CallGpu>>;

#[derive(Debug, Clone)]
struct Allocation {
    bytes: Option<u64>,
    kind: MemoryKind,
    gpu: GpuSlot,
    time_ns: i64,
    function_id: u32,
}

#[derive(Debug, Clone)]
struct Physical {
    bytes: u64,
    gpu: GpuSlot,
    released: bool,
    mappings: u32,
    time_ns: i64,
    function_id: u32,
}

/// One process's memory.
#[derive(Debug, Default)]
struct ProcessMemory {
    allocations: FxHashMap<u64, Allocation>,
    physical: FxHashMap<u64, Physical>,
    /// Mapped address -> (physical handle, size).
    mappings: BTreeMap<u64, (u64, u64)>,
    held: HeldByGpu,
    /// Its `cuInit` was seen: everything it holds was seen allocated.
    seen_from_start: bool,
    /// Something it allocated was not followed (the bound), or a free named an unknown pointer.
    incomplete: bool,
    comm: String,
}

/// What one (process, GPU) holds, for the periodic rows and the metric.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HolderSnapshot {
    pub pid: i32,
    pub comm: String,
    pub gpu: GpuKey,
    pub held: Held,
    /// Every allocation of the process was seen (its `cuInit`, nothing over the bound, no
    /// free of an unknown pointer).
    pub complete: bool,
}

/// Every traced process's memory.
#[derive(Debug, Default)]
pub struct MemoryLedger {
    processes: FxHashMap<i32, ProcessMemory>,
    /// Some allocation or free function is aggregated (`stats`): no process is complete.
    partial: bool,
    entries: usize,
    /// Allocations not followed because of the bound.
    untracked: u64,
}

impl MemoryLedger {
    /// A ledger; `partial` when some allocation or free function makes no rows.
    pub fn new(partial: bool) -> Self {
        Self {
            partial,
            ..Self::default()
        }
    }

    fn complete(&self, process: &ProcessMemory) -> bool {
        process.seen_from_start && !process.incomplete && !self.partial
    }

    /// Applies a row of `role` that ran on `gpu`; for an allocation that failed with
    /// `CUDA_ERROR_OUT_OF_MEMORY`, what the process held on that GPU then.
    pub fn apply(
        &mut self,
        role: MemoryRole,
        row: &CudaRow<'_>,
        gpu: Option<&Arc<CallGpu>>,
        function_id: u32,
        function_name: impl Fn(u32) -> String,
    ) -> Option<HeldMemory> {
        if role == MemoryRole::None {
            return None;
        }
        if row.result != 0 {
            let allocates = matches!(role, MemoryRole::Allocates(_) | MemoryRole::CreatesPhysical);
            return (allocates && row.result == OUT_OF_MEMORY)
                .then(|| self.held_memory(row.pid, gpu, function_name));
        }
        let room = self.entries < MAX_ENTRIES;
        let process = self.processes.entry(row.pid).or_default();
        if process.comm != row.comm {
            process.comm = row.comm.to_string();
        }
        // Allocations name their GPU by its place in the process's list: no reference count
        // is touched per row (atomic read-modify-writes per row were a visible share of the
        // consumer's time on a 16-CPU host).
        let mut added = 0isize;
        match (role, row.device_ptr) {
            (MemoryRole::Initializes, _) => process.seen_from_start = true,
            (MemoryRole::Allocates(kind), Some(pointer)) => {
                let Some(slot) = room.then(|| process.held.slot(gpu)).flatten() else {
                    process.incomplete = true;
                    self.untracked += 1;
                    return None;
                };
                let allocation = Allocation {
                    bytes: row.bytes,
                    kind,
                    gpu: slot,
                    time_ns: row.time_ns,
                    function_id,
                };
                process
                    .held
                    .at(slot)
                    .add(kind, allocation.bytes.unwrap_or(0));
                added += 1;
                // A pointer handed out again: its old allocation was freed unseen.
                if let Some(old) = process.allocations.insert(pointer, allocation) {
                    process.forget(old.gpu, old.kind, old.bytes.unwrap_or(0));
                    added -= 1;
                }
            }
            (MemoryRole::Frees, Some(pointer)) => match process.allocations.remove(&pointer) {
                Some(old) => {
                    process.forget(old.gpu, old.kind, old.bytes.unwrap_or(0));
                    added -= 1;
                }
                // cuMemFree(0) is a no-op.
                None if pointer != 0 => process.incomplete = true,
                None => {}
            },
            (MemoryRole::CreatesPhysical, Some(handle)) => {
                let Some(slot) = room.then(|| process.held.slot(gpu)).flatten() else {
                    process.incomplete = true;
                    self.untracked += 1;
                    return None;
                };
                let bytes = row.bytes.unwrap_or(0);
                process.held.at(slot).add(MemoryKind::Physical, bytes);
                let physical = Physical {
                    bytes,
                    gpu: slot,
                    released: false,
                    mappings: 0,
                    time_ns: row.time_ns,
                    function_id,
                };
                added += 1;
                if let Some(old) = process.physical.insert(handle, physical) {
                    process.forget(old.gpu, MemoryKind::Physical, old.bytes);
                    added -= 1;
                }
            }
            (MemoryRole::ReleasesPhysical, Some(handle)) => {
                if let Some(physical) = process.physical.get_mut(&handle) {
                    physical.released = true;
                } else {
                    process.incomplete = true;
                }
                added -= process.drop_if_unused(handle);
            }
            (MemoryRole::Maps, Some(address)) => {
                let (Some(handle), Some(size)) = (row.objects.handle, row.bytes) else {
                    return None;
                };
                if let Some(physical) = process.physical.get_mut(&handle) {
                    if room {
                        physical.mappings += 1;
                        if let Some((old, _)) = process.mappings.insert(address, (handle, size)) {
                            added -= process.unmapped(old);
                        } else {
                            added += 1;
                        }
                    }
                }
            }
            (MemoryRole::Unmaps, Some(address)) => {
                let end = address.saturating_add(row.bytes.unwrap_or(1).max(1));
                let inside: Vec<u64> = process
                    .mappings
                    .range(address..end)
                    .map(|(a, _)| *a)
                    .collect();
                for start in inside {
                    if let Some((handle, _)) = process.mappings.remove(&start) {
                        added -= 1 + process.unmapped(handle);
                    }
                }
            }
            _ => {}
        }
        self.entries = self.entries.saturating_add_signed(added);
        None
    }

    /// What `pid` holds on `gpu` (allocations of an unknown GPU included) and its largest
    /// outstanding allocations there.
    pub fn held_memory(
        &self,
        pid: i32,
        gpu: Option<&Arc<CallGpu>>,
        function_name: impl Fn(u32) -> String,
    ) -> HeldMemory {
        let Some(process) = self.processes.get(&pid) else {
            return HeldMemory {
                bytes: [0; 5],
                seen_from_start: false,
                largest: Vec::new(),
            };
        };
        let on_gpu = |key: Option<&Arc<CallGpu>>| key.is_none() || gpu.is_none() || key == gpu;
        let on_slot = |slot: GpuSlot| on_gpu(process.held.gpu(slot));
        let mut bytes = [0u64; 5];
        for (_, held) in process
            .held
            .0
            .iter()
            .filter(|(key, _)| on_gpu(key.as_ref()))
        {
            for (sum, value) in bytes.iter_mut().zip(held.bytes) {
                *sum = sum.saturating_add(value);
            }
        }
        let mut largest: Vec<LargeAllocation> =
            process
                .allocations
                .iter()
                .filter(|(_, a)| on_slot(a.gpu))
                .map(|(address, a)| LargeAllocation {
                    address: *address,
                    bytes: a.bytes,
                    kind: a.kind.name(),
                    function: function_name(a.function_id),
                    time_ns: a.time_ns,
                })
                .chain(process.physical.iter().filter(|(_, p)| on_slot(p.gpu)).map(
                    |(handle, p)| LargeAllocation {
                        address: *handle,
                        bytes: Some(p.bytes),
                        kind: MemoryKind::Physical.name(),
                        function: function_name(p.function_id),
                        time_ns: p.time_ns,
                    },
                ))
                .collect();
        largest.sort_by(|a, b| {
            b.bytes
                .cmp(&a.bytes)
                .then(a.time_ns.cmp(&b.time_ns))
                .then(a.address.cmp(&b.address))
        });
        largest.truncate(LARGEST_LISTED);
        HeldMemory {
            bytes,
            seen_from_start: self.complete(process),
            largest,
        }
    }

    /// Every (process, GPU) holding something or with allocations outstanding.
    pub fn holders(&self) -> Vec<HolderSnapshot> {
        let mut holders: Vec<HolderSnapshot> = self
            .processes
            .iter()
            .flat_map(|(pid, process)| {
                process
                    .held
                    .0
                    .iter()
                    .filter(|(_, held)| held.allocations > 0)
                    .map(move |(gpu, held)| HolderSnapshot {
                        pid: *pid,
                        comm: process.comm.clone(),
                        gpu: gpu.clone(),
                        held: *held,
                        complete: self.complete(process),
                    })
            })
            .collect();
        holders.sort_by(|a, b| {
            (a.pid, a.gpu.as_ref().map(|g| &g.uuid)).cmp(&(b.pid, b.gpu.as_ref().map(|g| &g.uuid)))
        });
        holders
    }

    /// Allocations not followed because of the bound.
    pub fn untracked(&self) -> u64 {
        self.untracked
    }

    /// Forgets the processes in `gone` (exited).
    pub fn forget(&mut self, gone: &[i32]) {
        for pid in gone {
            if let Some(process) = self.processes.remove(pid) {
                let entries =
                    process.allocations.len() + process.physical.len() + process.mappings.len();
                self.entries = self.entries.saturating_sub(entries);
            }
        }
    }

    /// Forgets the processes that no longer exist under `proc_dir`.
    pub fn forget_exited(&mut self, proc_dir: &std::path::Path) {
        let gone: Vec<i32> = self
            .processes
            .keys()
            .filter(|pid| !super::process_exists(proc_dir, pid))
            .copied()
            .collect();
        self.forget(&gone);
    }
}

impl ProcessMemory {
    fn forget(&mut self, gpu: GpuSlot, kind: MemoryKind, bytes: u64) {
        self.held.at(gpu).remove(kind, bytes);
    }

    /// One mapping of `handle` gone; returns the entries freed besides the mapping (1 when the
    /// handle itself went).
    fn unmapped(&mut self, handle: u64) -> isize {
        if let Some(physical) = self.physical.get_mut(&handle) {
            physical.mappings = physical.mappings.saturating_sub(1);
        }
        self.drop_if_unused(handle)
    }

    /// Frees a released handle no mapping uses; returns 1 when it did.
    fn drop_if_unused(&mut self, handle: u64) -> isize {
        match self.physical.get(&handle) {
            Some(p) if p.released && p.mappings == 0 => {
                let p = self.physical.remove(&handle).expect("just seen");
                self.forget(p.gpu, MemoryKind::Physical, p.bytes);
                1
            }
            _ => 0,
        }
    }
}

mod held;
pub mod report;
#[cfg(test)]
mod tests;
