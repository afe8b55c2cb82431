//! The history's state under its one lock: each process's last launches and latest
//! synchronisations, its devices, and the kernel-name table.

use std::collections::{HashMap, VecDeque};
use std::path::Path;
use std::sync::Arc;

use gpuship_sinks::schema::{CallGpu, CudaRow};

use super::launch::{launch_dims, Launch, Syncs};
use super::MAX_SUSPECTS;
use crate::sources::cuda::catalog::KernelRole;
use crate::sources::cuda::devices::ProcessDevices;
use crate::sources::cuda::kernels::{KernelName, KernelNames};
use crate::sources::cuda::process_exists;

/// Processes whose launches and synchronisations are kept.
const MAX_PROCESSES: usize = 8192;

/// Streams whose latest synchronisation is kept, per process.
const MAX_STREAMS: usize = 256;

/// What the CUDA thread writes and the XID stage reads, under one lock.
#[derive(Debug, Default)]
pub struct HistoryState {
    /// Which kernel each handle is.
    pub kernels: KernelNames,
    launches: HashMap<i32, VecDeque<Launch>>,
    syncs: HashMap<i32, Syncs>,
    /// Each process's devices and contexts as the CUDA thread last published them (the GPU of
    /// a flight-recorder launch).
    pub devices: HashMap<i32, Arc<ProcessDevices>>,
    /// Processes found gone at the last check: forgotten if still gone at the next, so that an
    /// XID reported just after its process died (the usual order) still finds its kernels.
    gone: Vec<i32>,
}

impl HistoryState {
    /// Remembers a launch row (of `rows` mode; `name` None for an unknown handle).
    pub fn launched(
        &mut self,
        row: &CudaRow<'_>,
        function_id: u32,
        name: Option<Arc<KernelName>>,
        gpu: Option<Arc<CallGpu>>,
    ) {
        // A launch that failed never ran on the GPU.
        let (Some(handle), 0) = (row.objects.handle, row.result) else {
            return;
        };
        if !self.launches.contains_key(&row.pid) && self.launches.len() >= MAX_PROCESSES {
            return;
        }
        let launches = self.launches.entry(row.pid).or_default();
        if launches.len() == MAX_SUSPECTS {
            launches.pop_front();
        }
        let dims = launch_dims(row);
        launches.push_back(Launch {
            time_ns: row.time_ns,
            end_ns: row.time_ns.saturating_add_unsigned(row.duration_ns),
            tid: row.tid,
            function_id,
            handle,
            name,
            stream: row.stream,
            grid: dims.0,
            block: dims.1,
            gpu,
        });
    }

    /// Remembers a successful synchronisation of a row of `role` (entry time `time_ns`).
    pub fn synchronized(&mut self, role: KernelRole, row: &CudaRow<'_>) {
        if row.result != 0 {
            return;
        }
        if !self.syncs.contains_key(&row.pid) && self.syncs.len() >= MAX_PROCESSES {
            return;
        }
        let syncs = self.syncs.entry(row.pid).or_default();
        match (role, row.stream) {
            (KernelRole::SyncsContext, _) => {
                if syncs.context_by_thread.len() >= MAX_STREAMS
                    && !syncs.context_by_thread.contains_key(&row.tid)
                {
                    syncs.context_by_thread.clear();
                }
                syncs.context_by_thread.insert(row.tid, row.time_ns);
            }
            (KernelRole::SyncsStream, Some(stream)) => {
                if syncs.streams.len() >= MAX_STREAMS && !syncs.streams.contains_key(&stream) {
                    syncs.streams.clear();
                }
                syncs.streams.insert(stream, row.time_ns);
            }
            _ => {}
        }
    }

    /// Nothing known yet.
    pub fn new() -> Self {
        HistoryState {
            kernels: KernelNames::new(),
            ..HistoryState::default()
        }
    }

    /// The launches kept of process `pid`, oldest first.
    pub(super) fn launches_of(&self, pid: i32) -> Option<&VecDeque<Launch>> {
        self.launches.get(&pid)
    }

    /// The latest synchronisations of process `pid`.
    pub(super) fn syncs_of(&self, pid: i32) -> Option<&Syncs> {
        self.syncs.get(&pid)
    }

    /// Forgets processes that no longer exist under `proc_dir` and were already gone at the
    /// previous call (one check interval of grace).
    pub fn forget_exited(&mut self, proc_dir: &Path) {
        let alive = |pid: &i32| process_exists(proc_dir, pid);
        let gone_before = std::mem::take(&mut self.gone);
        for pid in gone_before.iter().filter(|pid| !alive(pid)) {
            self.kernels.forget_process(*pid);
            self.launches.remove(pid);
            self.syncs.remove(pid);
            self.devices.remove(pid);
        }
        let mut known: Vec<i32> = self.kernels.pids();
        known.extend(
            self.launches
                .keys()
                .chain(self.syncs.keys())
                .chain(self.devices.keys()),
        );
        known.sort_unstable();
        known.dedup();
        self.gone = known.into_iter().filter(|pid| !alive(pid)).collect();
    }
}
