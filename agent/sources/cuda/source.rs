//! The CUDA source as the consumer runs it: records to rows (with their container and pod),
//! rows to batches, per-call totals for the summary and the live view, and what XID
//! attribution needs (which processes call, which failed calls belong to an incident).

use std::collections::HashMap;
use std::mem::MaybeUninit;
use std::sync::Arc;
use std::time::{Duration, Instant};

use gpuship_sinks::EventBatch;
use libbpf_rs::{MapHandle, OpenObject};

use super::batcher::CudaBatcher;
use super::decode::{cuda_event, record_name, returned_uuid, Decoder};
use super::devices::CallDevices;
use super::history::CudaLaunchHistory;
use super::kernels::rows::{self as kernel_rows, Resolved};
use super::memory::MemoryLedger;
use super::probes::{self, CudaProbes, ProcessFilter};
use super::recorder::{is_sticky, DumpPlan};
use super::roles::{memory_role, MemoryRole, RoleTable};
use super::stats::StatsDrain;
use crate::accounting::{Accounting, Ring};
use crate::decode::{c_chars, DecodeError};
use crate::diagnosis::{Check, HostFacts};
use crate::enrich::WorkloadResolver;
use crate::sources::config::SourcesConfig;
use crate::sources::output::{CallView, Outputs};
use crate::sources::source::{Loaded, RingMaps, RingSource, RunningRing, SourceSetup};
use crate::summary::{CallTally, RunSummary};

/// The source's name in statuses.
const NAME: &str = "cuda";

/// How stale a process's latest-call time may get before it is refreshed.
const ACTIVITY_RESOLUTION_NS: i64 = 100_000_000;

/// How often the kernel names of exited processes are forgotten.
const KERNEL_NAMES_EXPIRY: Duration = Duration::from_secs(30);

/// The CUDA uprobes source (see [`crate::sources::REGISTRY`]).
pub struct CudaSource;

impl RingSource for CudaSource {
    fn name(&self) -> &'static str {
        NAME
    }

    fn doctor(&self, sources: &SourcesConfig, host: &HostFacts) -> Vec<Check> {
        super::doctor::checks(&sources.cuda, host)
    }

    fn load<'obj>(
        &self,
        storage: &'obj mut MaybeUninit<OpenObject>,
        setup: &SourceSetup,
    ) -> Loaded<'obj> {
        let config = &setup.sources.cuda;
        if !config.enabled {
            return Loaded::skipped(NAME, "disabled in config");
        }
        match probes::load(storage, config, setup.filter, &setup.enrich.proc_dir) {
            Ok(Ok(mut probes)) => {
                probes.start_budget(&setup.enrich.proc_dir, &setup.accounting);
                let detail = match (probes.probed_symbols, probes.discovery.is_some()) {
                    (0, true) => {
                        "no library mapped yet; attaching each libcuda processes map".to_string()
                    }
                    (symbols, true) => format!(
                        "{symbols} symbols in {} libraries; attaching each libcuda processes map",
                        probes.attached_files()
                    ),
                    (symbols, false) => format!("{symbols} symbols"),
                };
                if let Some(discovery) = probes.discovery.as_ref() {
                    let libraries = &setup.accounting.libraries;
                    let statuses = discovery.statuses();
                    let failed = statuses.iter().filter(|s| s.error.is_some()).count();
                    libraries
                        .discovering
                        .store(true, std::sync::atomic::Ordering::Relaxed);
                    libraries
                        .attach_failures
                        .fetch_add(failed as u64, std::sync::atomic::Ordering::Relaxed);
                    libraries.publish(statuses);
                }
                Loaded::attached(NAME, detail, Box::new(CudaCapture::new(probes, setup)))
            }
            Ok(Err(reason)) => Loaded::skipped(NAME, reason),
            Err(err) => Loaded::skipped(NAME, format!("{err:#}")),
        }
    }
}

/// A set of function ids, as a bitmap indexed by id.
#[derive(Debug, Default)]
struct FunctionSet(Vec<bool>);

impl FunctionSet {
    fn new(ids: &[u32]) -> Self {
        let mut set = Vec::new();
        for &id in ids {
            let index = id as usize;
            if index >= set.len() {
                set.resize(index + 1, false);
            }
            set[index] = true;
        }
        Self(set)
    }

    #[inline]
    fn contains(&self, id: u32) -> bool {
        self.0.get(id as usize).copied().unwrap_or(false)
    }
}

/// The attached probes and what the consumer holds between their records.
struct CudaCapture<'obj> {
    probes: CudaProbes<'obj>,
    filter: ProcessFilter,
    decoder: Decoder,
    batcher: CudaBatcher,
    calls: CallTally,
    /// Processes seen making calls since the last flush: pid -> latest call time.
    active: HashMap<i32, i64>,
    /// The pid and time last written to `active` (most rows repeat them).
    last_active: (i32, i64),
    /// Container and pod of each process, cached.
    workloads: WorkloadResolver,
    /// Per-process counts for the live view, and its publication.
    view: Box<dyn CallView>,
    outputs: Outputs,
    /// Intervals of the `stats` functions, when any is probed.
    stats: Option<StatsDrain>,
    /// Which function ids are in `stats` mode.
    stats_ids: FunctionSet,
    /// The flight recorder's incidents, when it runs.
    recorder: Option<DumpPlan>,
    /// Which kernel each handle is, each process's last launches and synchronisations (shared
    /// with the XID stage for suspects), and what each function id does to them.
    history: Arc<CudaLaunchHistory>,
    /// What each function id does to kernels, devices and memory.
    roles: RoleTable,
    /// Each process's devices and contexts: every row's GPU.
    devices: CallDevices,
    /// The memory each process holds, per GPU and kind.
    memory: MemoryLedger,
    /// How often it is written (`cuda_memory` rows, the metric): the statistics interval.
    memory_interval: Duration,
    memory_reported_at: Instant,
    identity: gpuship_sinks::schema::HostIdentity,
    /// Where processes' memory is read (cut kernel names) and their exits are seen.
    proc_dir: std::path::PathBuf,
    kernels_expired_at: Instant,
    /// When the library statuses were last published.
    libraries_published_at: Instant,
    /// Processes of incidents seen since the last flush, for the budget's full probing.
    boosts: Vec<u32>,
    accounting: Arc<Accounting>,
}

impl<'obj> CudaCapture<'obj> {
    fn new(probes: CudaProbes<'obj>, setup: &SourceSetup) -> Self {
        let functions = probes.functions.clone();
        let aggregated_memory: Vec<String> = probes
            .stats_function_ids
            .iter()
            .filter_map(|id| functions.name(*id))
            .filter(|name| {
                !matches!(
                    memory_role(name),
                    MemoryRole::None | MemoryRole::Initializes
                )
            })
            .map(str::to_string)
            .collect();
        if !aggregated_memory.is_empty() {
            tracing::warn!(
                functions = ?aggregated_memory,
                "allocations or frees in [sources.cuda] stats make no rows: the memory they hold or free is not followed (held bytes of those processes are incomplete)"
            );
        }
        Self {
            filter: setup.filter,
            decoder: Decoder::new(setup.clocks, functions.clone()),
            batcher: CudaBatcher::new(setup.identity.clone(), &setup.batch),
            calls: CallTally::default(),
            active: HashMap::new(),
            last_active: (0, 0),
            workloads: WorkloadResolver::new(&setup.enrich.proc_dir, &setup.enrich.pod_log_dir),
            view: setup.outputs.calls.open(functions),
            outputs: setup.outputs.clone(),
            stats: probes.aggregates.then(|| {
                StatsDrain::new(
                    setup.identity.clone(),
                    Duration::from_secs(setup.sources.cuda.stats_interval_secs),
                    Instant::now(),
                )
            }),
            accounting: Arc::clone(&setup.accounting),
            stats_ids: FunctionSet::new(&probes.stats_function_ids),
            recorder: probes.recorder.enabled().then(|| {
                DumpPlan::new(
                    setup.identity.host.clone(),
                    gpuship_sinks::limits::nanos_i64(Duration::from_secs(
                        setup.sources.cuda.flight_recorder_secs,
                    )),
                )
            }),
            history: CudaLaunchHistory::for_probes(&probes, setup),
            roles: RoleTable::new(&probes.functions),
            devices: CallDevices::new(Arc::clone(&setup.gpus)),
            memory: MemoryLedger::new(!aggregated_memory.is_empty()),
            memory_interval: Duration::from_secs(setup.sources.cuda.stats_interval_secs),
            memory_reported_at: Instant::now(),
            identity: setup.identity.clone(),
            proc_dir: setup.enrich.proc_dir.clone(),
            kernels_expired_at: Instant::now(),
            libraries_published_at: Instant::now(),
            boosts: Vec::new(),
            probes,
        }
    }

    /// The row of one record, counted and batched; a full batch when one is due.
    #[inline]
    fn batch_record(&mut self, raw: &[u8]) -> Result<Option<EventBatch>, DecodeError> {
        let Self {
            decoder,
            batcher,
            calls,
            stats_ids,
            active,
            last_active,
            workloads,
            view,
            outputs,
            recorder,
            history,
            roles,
            devices,
            memory,
            proc_dir,
            accounting,
            boosts,
            ..
        } = self;
        let event = cuda_event(raw)?;
        let name = record_name(raw, &event)?;
        let comm = c_chars(&event.comm);
        let mut row = decoder.cuda_row(&event, &comm)?;
        row.workload = workloads.resolve(row.pid).map(|w| &**w);
        // Kernel handles: what this call teaches the name table, then the row's names; launches
        // and synchronisations go to the history an XID's suspects come from.
        let roles = roles.get(event.function_id);
        let (gpu, changed) = devices.observe(roles.device, &row, returned_uuid(&event).as_ref());
        if let Some(process) = changed {
            history.devices_changed(row.pid, process);
        }
        let carried = name.as_ref().and_then(|name| {
            kernel_rows::record_kernel_name(name, row.pid, proc_dir, row.result == 0)
        });
        let resolved =
            history.record_row(roles.kernel, event.function_id, &row, carried.as_ref(), gpu);
        if resolved == Resolved::Unknown {
            accounting
                .ring(Ring::Cuda)
                .unknown_kernel_launches
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        kernel_rows::apply(&mut row, &resolved);
        row.objects.gpu = gpu.map(|g| &**g);
        let held = memory.apply(roles.memory, &row, gpu, event.function_id, |id| {
            decoder.function_name(id).unwrap_or("unknown").to_string()
        });
        row.objects.memory = held.as_ref();
        let counted_by_aggregate = row.result == 0 && stats_ids.contains(event.function_id);
        if !counted_by_aggregate {
            calls.record(event.function_id, &row);
            if view.call(row.pid, &event.comm, row.result != 0) {
                view.publish(calls, Instant::now(), false);
            }
        }
        let (last_pid, last_time) = *last_active;
        if row.pid != last_pid || row.time_ns - last_time > ACTIVITY_RESOLUTION_NS {
            active.insert(row.pid, row.time_ns);
            *last_active = (row.pid, row.time_ns);
        }
        // A failed call of a process an XID incident affected carries the incident.
        if row.result != 0 {
            let mut incident = outputs.attribution.incident_for(row.pid, row.time_ns);
            // A sticky error starts an incident: the flight recorder writes the seconds before.
            if let Some(plan) = recorder.as_mut().filter(|_| is_sticky(row.result)) {
                incident = Some(plan.sticky_failure(row.pid, row.time_ns, incident));
            }
            if is_sticky(row.result) {
                boosts.push(row.pid as u32);
            }
            return Ok(batcher.push_linked(&row, incident.as_deref()));
        }
        Ok(batcher.push(&row))
    }
}

mod libraries;
mod periodic;

impl RunningRing for CudaCapture<'_> {
    fn rings(&self) -> anyhow::Result<Vec<RingMaps>> {
        let maps = &self.probes.skel.maps;
        Ok(vec![RingMaps {
            ring: Ring::Cuda,
            records: MapHandle::try_from(&maps.cuda_ring)?,
            kernel_counters: MapHandle::try_from(&maps.cuda_stats)?,
        }])
    }

    #[inline]
    fn on_record(&mut self, _ring: Ring, raw: &[u8]) -> Result<(), DecodeError> {
        match self.batch_record(raw) {
            Ok(Some(batch)) => self.outputs.batches.emit(batch),
            Ok(None) => {}
            Err(err) => {
                tracing::debug!(%err, len = raw.len(), "malformed CUDA record skipped");
                return Err(err);
            }
        }
        Ok(())
    }

    /// Sends rows that are due (all of them when `all`), tells XID attribution which
    /// processes made calls, and publishes the live view's totals.
    fn flush(&mut self, now: Instant, all: bool) {
        if !all {
            self.discover_libraries(now);
        }
        if !self.active.is_empty() {
            self.outputs
                .attribution
                .processes_active(&mut self.active.drain());
            self.last_active = (0, 0);
        }
        self.workloads.expire_if_due(now);
        if all || now.duration_since(self.kernels_expired_at) >= KERNEL_NAMES_EXPIRY {
            let mut state = self.history.lock();
            state.forget_exited(&self.proc_dir);
            self.devices.forget_exited(&self.proc_dir);
            self.memory.forget_exited(&self.proc_dir);
            self.probes.forget_exited_answers(&self.proc_dir);
            self.kernels_expired_at = now;
            self.accounting.ring(Ring::Cuda).kernel_names_dropped.store(
                state.kernels.dropped(),
                std::sync::atomic::Ordering::Relaxed,
            );
        }
        self.write_flight_recorder();
        self.budget_tick(now);
        self.poll_stats(now, all);
        self.report_memory(now, all);
        self.view.publish(&self.calls, now, all);
        let batch = if all {
            self.batcher.flush()
        } else {
            self.batcher.flush_if_due(now)
        };
        if let Some(batch) = batch {
            self.outputs.batches.emit(batch);
        }
    }

    fn detach(&self) {
        self.probes.detach();
    }

    fn traced_processes(&self) -> anyhow::Result<Option<MapHandle>> {
        match self.filter {
            ProcessFilter::Selected => Ok(Some(self.probes.traced_tgids()?)),
            ProcessFilter::All => Ok(None),
        }
    }

    fn finish(&mut self, summary: &mut RunSummary) {
        let functions = &self.probes.functions;
        std::mem::take(&mut self.calls).add_to(summary, |id| functions.name(id));
    }
}
