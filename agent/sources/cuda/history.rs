//! The last kernel launches of each process and its latest synchronisations, from which an
//! XID that points at a running kernel (31, 13, 43, ...) gets its suspects: the kernels the
//! attributed process launched last before the XID, most recent first, each marked completed
//! when a later synchronisation covering it returned successfully.
//!
//! Launches come from two places. In `rows` mode each launch row is remembered here (the last
//! `MAX_SUSPECTS` per process). In `stats` mode launches make no row: the flight recorder's
//! slots in the kernel hold them, and are read when an XID asks. Names come from the kernel-name
//! table, which lives here too so that the XID stage's thread can read it.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use gpuship_sinks::schema::{CallGpu, CudaRow, KernelSuspect};
use libbpf_rs::MapHandle;

use super::budget::unobserved::Unobserved;
use super::catalog::KernelRole;
use super::decode::Decoder;
use super::devices::{self, ProcessDevices};
use super::kernels::name::UNKNOWN;
use super::kernels::rows::{self as kernel_rows, Resolved};
use super::kernels::KernelName;
use super::probes::CudaProbes;
use super::recorder;
use super::roles::RoleTable;
use crate::bpf::cuda::types::cuda_event;
use crate::sources::output::LaunchHistory;
use crate::sources::source::SourceSetup;
use launch::{launch_dims, Launch};
pub use state::HistoryState;

/// Most suspects an XID lists (`[sources.xid] suspects`), and launches kept per process.
pub const MAX_SUSPECTS: usize = 32;

/// How long one read of the flight recorder serves further XIDs: a storm of XIDs (one per
/// faulting channel) reads the kernel's slots once, not once each. A read serves only XIDs from
/// before it was taken, so no launch before an XID is missed.
const RECORDER_READ_REUSE: Duration = Duration::from_millis(200);

/// One read of the flight recorder's slots.
#[derive(Debug)]
struct RecorderRead {
    at: Instant,
    /// When it was taken, Unix ns: it serves XIDs up to this time only.
    at_unix_ns: i64,
    calls: Arc<Vec<cuda_event>>,
}

fn unix_now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, gpuship_sinks::limits::nanos_i64)
}

/// The shared history: the CUDA thread writes it, the XID stage asks it for suspects.
pub struct CudaLaunchHistory {
    state: Mutex<HistoryState>,
    /// The flight recorder's slots (`stats` mode), read when an XID asks.
    recorder: Option<MapHandle>,
    /// The last read of `recorder`, and when it was taken.
    recorder_read: Mutex<Option<RecorderRead>>,
    /// How recorder slots are decoded and what each function id does (replaced when a
    /// library found later brings more functions).
    naming: std::sync::RwLock<(Decoder, RoleTable)>,
    /// The node's GPU when it has exactly one (any call's GPU).
    node_gpu: Option<Arc<CallGpu>>,
    /// Under the overhead budget: when processes went unprobed, and the window before an
    /// incident that counts (the flight recorder's).
    unobserved: Option<(Arc<Unobserved>, i64)>,
}

impl CudaLaunchHistory {
    /// A history decoding recorder slots with `decoder` and `roles` (by function id), on a
    /// node whose only GPU is `node_gpu` (None: none, or several).
    pub fn new(
        recorder: Option<MapHandle>,
        decoder: Decoder,
        roles: RoleTable,
        node_gpu: Option<Arc<CallGpu>>,
    ) -> Self {
        Self {
            state: Mutex::new(HistoryState::new()),
            recorder,
            recorder_read: Mutex::new(None),
            naming: std::sync::RwLock::new((decoder, roles)),
            node_gpu,
            unobserved: None,
        }
    }

    /// The flight recorder's calls for an XID at `before_ns`: a read taken after that time and
    /// less than `RECORDER_READ_REUSE` ago, else a fresh one.
    fn recorder_calls(&self, before_ns: i64) -> Arc<Vec<cuda_event>> {
        let Some(map) = &self.recorder else {
            return Arc::default();
        };
        let mut last = self.recorder_read.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(read) = last.as_ref() {
            if read.at.elapsed() < RECORDER_READ_REUSE && read.at_unix_ns >= before_ns {
                return Arc::clone(&read.calls);
            }
        }
        let at_unix_ns = unix_now_ns();
        let calls = Arc::new(recorder::read_calls(map).0);
        *last = Some(RecorderRead {
            at: Instant::now(),
            at_unix_ns,
            calls: Arc::clone(&calls),
        });
        calls
    }

    /// The launch history of these probes, registered with XID attribution for suspects.
    pub fn for_probes(probes: &CudaProbes<'_>, setup: &SourceSetup) -> Arc<Self> {
        let functions = &probes.functions;
        let roles = RoleTable::new(functions);
        let recorder = probes
            .recorder
            .enabled()
            .then(|| MapHandle::try_from(&probes.skel.maps.recorder))
            .transpose()
            .unwrap_or_else(|err| {
                tracing::warn!(%err, "the flight recorder cannot be read for XID suspects");
                None
            });
        let decoder = Decoder::new(setup.clocks, functions.clone());
        let node_gpu = devices::node_gpu(&setup.gpus);
        let window_ns = i64::try_from(setup.sources.cuda.flight_recorder_secs)
            .unwrap_or(i64::MAX)
            .saturating_mul(1_000_000_000);
        let mut history = CudaLaunchHistory::new(recorder, decoder, roles, node_gpu);
        history.unobserved = Some((Arc::clone(&probes.unobserved), window_ns));
        let history = Arc::new(history);
        setup.outputs.attribution.launch_history(history.clone());
        history
    }

    /// What a row of `role` teaches the kernel table (`carried`: the name its record took),
    /// remembered for suspects (a launch on `gpu`, a synchronisation), and the kernel it
    /// names.
    pub fn record_row(
        &self,
        role: KernelRole,
        function_id: u32,
        row: &CudaRow<'_>,
        carried: Option<&Arc<KernelName>>,
        gpu: Option<&Arc<CallGpu>>,
    ) -> Resolved {
        if role == KernelRole::None {
            return Resolved::Nothing;
        }
        let mut state = self.lock();
        kernel_rows::learn(&mut state.kernels, role, row, carried);
        let resolved = match carried {
            Some(name) => Resolved::Named(name.clone()),
            None => kernel_rows::resolve(&mut state.kernels, role, row),
        };
        match (role, &resolved) {
            (KernelRole::Launch, Resolved::Named(name)) => {
                state.launched(row, function_id, Some(name.clone()), gpu.cloned());
            }
            (KernelRole::Launch, _) => state.launched(row, function_id, None, gpu.cloned()),
            (KernelRole::SyncsContext | KernelRole::SyncsStream, _) => {
                state.synchronized(role, row);
            }
            _ => {}
        }
        resolved
    }

    /// The state, for the CUDA thread.
    pub fn lock(&self) -> MutexGuard<'_, HistoryState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// What function `id` does to kernel names and launches.
    #[inline]
    pub fn role(&self, id: u32) -> KernelRole {
        self.naming().1.get(id).kernel
    }

    /// Names function ids with `functions` from now on (a library found later brought more).
    pub fn set_functions(&self, functions: &crate::sources::functions::FunctionTable) {
        let mut naming = self.naming.write().unwrap_or_else(|e| e.into_inner());
        naming.0.set_functions(functions.clone());
        naming.1 = RoleTable::new(functions);
    }

    fn naming(&self) -> std::sync::RwLockReadGuard<'_, (Decoder, RoleTable)> {
        self.naming.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Publishes a process's devices, as the CUDA thread's `CallDevices` changed them.
    pub fn devices_changed(&self, pid: i32, devices: Arc<ProcessDevices>) {
        self.lock().devices.insert(pid, devices);
    }

    /// The flight recorder's launches of `pid` among `events`, with their names.
    fn recorded_launches(
        &self,
        events: &[cuda_event],
        pid: i32,
        state: &HistoryState,
    ) -> Vec<Launch> {
        let naming = self.naming();
        let (decoder, roles) = &*naming;
        events
            .iter()
            .filter(|e| {
                e.pid as i32 == pid && roles.get(e.function_id).kernel == KernelRole::Launch
            })
            .filter_map(|event| {
                let row = decoder.cuda_row(event, "").ok()?;
                let handle = row.objects.handle?;
                let dims = launch_dims(&row);
                Some(Launch {
                    time_ns: row.time_ns,
                    end_ns: row.time_ns.saturating_add_unsigned(row.duration_ns),
                    tid: row.tid,
                    function_id: event.function_id,
                    handle,
                    name: state.kernels.get_at(pid, handle, row.time_ns),
                    stream: row.stream,
                    grid: dims.0,
                    block: dims.1,
                    gpu: devices::resolve(state.devices.get(&pid).map(|d| &**d), row.tid, || {
                        self.node_gpu.clone()
                    }),
                })
            })
            .collect()
    }
}

impl LaunchHistory for CudaLaunchHistory {
    fn launches_sampled_before(&self, pid: i32, before_ns: i64) -> bool {
        self.unobserved
            .as_ref()
            .is_some_and(|(unobserved, window_ns)| {
                unobserved.between(pid, before_ns.saturating_sub(*window_ns), before_ns)
            })
    }

    fn suspects(
        &self,
        pid: i32,
        bus_id: Option<&str>,
        before_ns: i64,
        max: usize,
    ) -> Vec<KernelSuspect> {
        let recorded = self.recorder_calls(before_ns);
        let state = self.lock();
        let mut launches = self.recorded_launches(&recorded, pid, &state);
        if let Some(rows) = state.launches_of(pid) {
            launches.extend(rows.iter().cloned());
        }
        launches.retain(|launch| launch.time_ns <= before_ns && launch.may_be_on(bus_id));
        launches.sort_by_key(|launch| std::cmp::Reverse(launch.time_ns));
        launches.truncate(max.min(MAX_SUSPECTS));
        let syncs = state.syncs_of(pid);
        launches
            .into_iter()
            .map(|launch| {
                let completed = syncs.is_some_and(|s| s.covers(&launch));
                let (mangled, demangled) = match &launch.name {
                    Some(name) => (name.mangled.to_string(), name.demangled.to_string()),
                    None => (UNKNOWN.to_string(), UNKNOWN.to_string()),
                };
                KernelSuspect {
                    time_ns: launch.time_ns,
                    tid: launch.tid,
                    function: self
                        .naming()
                        .0
                        .function_name(launch.function_id)
                        .unwrap_or("unknown")
                        .to_string(),
                    handle: launch.handle,
                    kernel_name: mangled,
                    kernel_name_demangled: demangled,
                    stream: launch.stream,
                    grid: launch.grid,
                    block: launch.block,
                    completed,
                }
            })
            .collect()
    }
}

mod launch;
mod state;
#[cfg(test)]
mod tests;
