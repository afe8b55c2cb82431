//! The GPU of every CUDA call. The driver API runs each call on the calling thread's current
//! context, and a context belongs to one device; so the agent follows, per process, which
//! device UUID each CUDA ordinal has (`cuDeviceGetUuid*`), which ordinal each context was made
//! on (`cuDevicePrimaryCtxRetain`, `cuCtxCreate*`) and each thread's context stack
//! (`cuCtxSetCurrent`, `cuCtxPushCurrent_v2`, `cuCtxPopCurrent_v2`), from the rows of those
//! calls, which always stay rows (`plan::keeps_its_return`).
//!
//! A call's GPU is, in order: its thread's current context's device; else, for a thread whose
//! context was never seen, the device of the process's contexts when they are all on one; else
//! the node's GPU when it has exactly one. Anything else is no GPU (null columns), never a
//! guess: a process started before the agent, or a device whose UUID it never asked for.

use rustc_hash::FxHashMap;
use std::path::Path;
use std::sync::Arc;

use gpuship_sinks::schema::{CallGpu, CudaRow};

use super::roles::DeviceRole;
use crate::enrich::GpuDirectory;

/// Processes whose devices are followed.
const MAX_PROCESSES: usize = 8192;

/// Contexts and device ordinals kept per process (a process makes a few).
const MAX_CONTEXTS: usize = 1024;

/// Threads whose context stack is kept per process; beyond it the stacks are dropped and those
/// threads fall back to the process's single device.
const MAX_THREADS: usize = 4096;

/// (pid, tid) answers kept between changes (about 140 KiB at the bound); beyond it they start
/// again, each one lookup to make again.
const MAX_ANSWERS: usize = 4096;

/// Contexts one thread's stack keeps (the driver nests pushes; real code nests a few).
const MAX_STACK: usize = 64;

/// The `GPU-...` form of a CUuuid's 16 bytes (nvidia-smi's and the driver's proc files').
pub fn uuid_string(bytes: &[u8; 16]) -> String {
    let hex = |range: std::ops::Range<usize>| {
        bytes[range]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    };
    format!(
        "GPU-{}-{}-{}-{}-{}",
        hex(0..4),
        hex(4..6),
        hex(6..8),
        hex(8..10),
        hex(10..16)
    )
}

/// What one process told about its devices and contexts.
#[derive(Debug, Clone, Default)]
pub struct ProcessDevices {
    /// CUDA ordinal -> its GPU.
    gpus: FxHashMap<i64, Arc<CallGpu>>,
    /// Context -> the ordinal it was made on.
    contexts: FxHashMap<u64, i64>,
    /// Thread -> its context stack (current on top, last).
    threads: FxHashMap<i32, Vec<u64>>,
}

impl ProcessDevices {
    /// The GPU of a call of thread `tid` (see the module doc; the node fallback is the
    /// caller's).
    pub fn gpu_of(&self, tid: i32) -> Option<&Arc<CallGpu>> {
        let current = self.threads.get(&tid).and_then(|stack| stack.last());
        match current {
            Some(context) => self.gpu_of_context(*context),
            None => self.only_gpu(),
        }
    }

    fn gpu_of_context(&self, context: u64) -> Option<&Arc<CallGpu>> {
        self.contexts
            .get(&context)
            .and_then(|ordinal| self.gpus.get(ordinal))
    }

    /// The device of every context of the process, when that is one device.
    fn only_gpu(&self) -> Option<&Arc<CallGpu>> {
        let mut ordinals = self.contexts.values();
        let first = ordinals.next()?;
        ordinals
            .all(|o| o == first)
            .then(|| self.gpus.get(first))
            .flatten()
    }

    fn stack(&mut self, tid: i32) -> &mut Vec<u64> {
        if self.threads.len() >= MAX_THREADS && !self.threads.contains_key(&tid) {
            self.threads.clear();
        }
        self.threads.entry(tid).or_default()
    }

    /// Applies a successful call of `role`; true when something changed.
    fn apply(&mut self, role: DeviceRole, row: &CudaRow<'_>, gpu: Option<Arc<CallGpu>>) -> bool {
        let handle = row.objects.handle;
        match (role, handle) {
            (DeviceRole::NamesDevice, Some(device)) => {
                let Some(gpu) = gpu else { return false };
                // A CUdevice is an int: the register's upper half is not part of it.
                let ordinal = i64::from(device as i32);
                if self.gpus.len() >= MAX_CONTEXTS && !self.gpus.contains_key(&ordinal) {
                    return false;
                }
                self.gpus.insert(ordinal, gpu);
            }
            (DeviceRole::MakesContext { becomes_current }, Some(context)) => {
                let Some(device) = row.objects.parent_handle else {
                    return false;
                };
                if self.contexts.len() >= MAX_CONTEXTS && !self.contexts.contains_key(&context) {
                    self.contexts.clear();
                }
                self.contexts.insert(context, i64::from(device as i32));
                if becomes_current {
                    self.push(row.tid, context);
                }
            }
            (DeviceRole::SetsCurrent, Some(context)) => {
                let stack = self.stack(row.tid);
                // cuCtxSetCurrent replaces the top; NULL unbinds it.
                stack.pop();
                if context != 0 {
                    stack.push(context);
                }
            }
            (DeviceRole::PushesCurrent, Some(context)) => self.push(row.tid, context),
            (DeviceRole::PopsCurrent, _) => {
                self.stack(row.tid).pop();
            }
            (DeviceRole::DestroysContext, Some(context)) => {
                self.contexts.remove(&context);
                for stack in self.threads.values_mut() {
                    stack.retain(|c| *c != context);
                }
            }
            _ => return false,
        }
        true
    }

    fn push(&mut self, tid: i32, context: u64) {
        let stack = self.stack(tid);
        if stack.len() >= MAX_STACK {
            stack.remove(0);
        }
        stack.push(context);
    }
}

/// Every traced process's devices, owned by the CUDA thread; each change is published to the
/// launch history (for the XID stage's suspects) by the caller of [`CallDevices::observe`].
///
/// Rows borrow their GPU from here: its reference count touched per row (atomic
/// read-modify-writes, a few per row between the devices and the memory ledger) put
/// `gpu_of` at 3.6% of the agent's samples in rows mode on a 16-CPU host (1.0% since).
#[derive(Debug, Default)]
pub struct CallDevices {
    gpus: Arc<GpuDirectory>,
    /// The node's GPU when it has exactly one (made once: rows share it).
    node: Option<Arc<CallGpu>>,
    processes: FxHashMap<i32, Arc<ProcessDevices>>,
    /// The GPU of each (pid, tid) answered since the last change: a call's GPU is one lookup.
    answers: FxHashMap<(i32, i32), Option<Arc<CallGpu>>>,
    /// The GPU of the row [`CallDevices::observe`] answered with the device it named.
    named: Option<Arc<CallGpu>>,
}

impl CallDevices {
    /// Devices resolved against the node's GPUs.
    pub fn new(gpus: Arc<GpuDirectory>) -> Self {
        let node = node_gpu(&gpus);
        Self {
            gpus,
            node,
            ..Self::default()
        }
    }

    /// The GPU a UUID names, with its bus id and index when the node lists it.
    pub fn gpu_of_uuid(&self, uuid: &[u8; 16]) -> Arc<CallGpu> {
        let uuid = uuid_string(uuid);
        let listed = self.gpus.lookup_uuid(&uuid);
        Arc::new(CallGpu {
            pci_bus_id: listed.as_ref().map(|(bus_id, _)| bus_id.clone()),
            index: listed.map(|(_, identity)| identity.index),
            uuid,
        })
    }

    /// Learns from a row of `role` (`uuid`: the UUID its record returned) and gives the row's
    /// GPU. Returns the process's new state when it changed, for publication.
    pub fn observe(
        &mut self,
        role: DeviceRole,
        row: &CudaRow<'_>,
        uuid: Option<&[u8; 16]>,
    ) -> (Option<&Arc<CallGpu>>, Option<Arc<ProcessDevices>>) {
        let mut changed = None;
        let mut own_gpu = None;
        if role != DeviceRole::None && row.result == 0 {
            own_gpu = uuid.map(|u| self.gpu_of_uuid(u));
            if let Some(process) = self.process_mut(row.pid) {
                let devices = Arc::make_mut(process);
                let applied = devices.apply(role, row, own_gpu.clone());
                // A context's creation is about the device it was made on.
                if let (DeviceRole::MakesContext { .. }, Some(device)) =
                    (role, row.objects.parent_handle)
                {
                    own_gpu = devices.gpus.get(&i64::from(device as i32)).cloned();
                }
                if applied {
                    changed = Some(Arc::clone(process));
                    self.answers.clear();
                }
            }
        }
        // A UUID query's row, or a context creation's, is about the device it named.
        if own_gpu.is_some() {
            self.named = own_gpu;
            return (self.named.as_ref(), changed);
        }
        (self.gpu_of(row.pid, row.tid), changed)
    }

    fn process_mut(&mut self, pid: i32) -> Option<&mut Arc<ProcessDevices>> {
        if !self.processes.contains_key(&pid) && self.processes.len() >= MAX_PROCESSES {
            return None;
        }
        Some(self.processes.entry(pid).or_default())
    }

    /// The GPU of a call of (`pid`, `tid`) as things stand.
    pub fn gpu_of(&mut self, pid: i32, tid: i32) -> Option<&Arc<CallGpu>> {
        if self.answers.len() >= MAX_ANSWERS && !self.answers.contains_key(&(pid, tid)) {
            self.answers.clear();
        }
        let Self {
            answers,
            processes,
            node,
            ..
        } = self;
        answers
            .entry((pid, tid))
            .or_insert_with(|| resolve(processes.get(&pid).map(|p| &**p), tid, || node.clone()))
            .as_ref()
    }

    /// Forgets processes that no longer exist under `proc_dir`; returns them.
    pub fn forget_exited(&mut self, proc_dir: &Path) -> Vec<i32> {
        let gone: Vec<i32> = self
            .processes
            .keys()
            .filter(|pid| !super::process_exists(proc_dir, pid))
            .copied()
            .collect();
        for pid in &gone {
            self.processes.remove(pid);
        }
        if !gone.is_empty() {
            self.answers.clear();
        }
        gone
    }
}

/// The node's GPU, when `gpus` lists exactly one.
pub fn node_gpu(gpus: &GpuDirectory) -> Option<Arc<CallGpu>> {
    let (bus_id, identity) = gpus.only()?;
    Some(Arc::new(CallGpu {
        uuid: identity.uuid.clone(),
        pci_bus_id: Some(bus_id.to_string()),
        index: Some(identity.index),
    }))
}

/// A call's GPU from its process's devices, else `node` (the node's only GPU).
pub fn resolve(
    process: Option<&ProcessDevices>,
    tid: i32,
    node: impl FnOnce() -> Option<Arc<CallGpu>>,
) -> Option<Arc<CallGpu>> {
    process.and_then(|p| p.gpu_of(tid)).cloned().or_else(node)
}

#[cfg(test)]
mod tests;
