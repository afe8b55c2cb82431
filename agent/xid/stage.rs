//! The XID stage between the sources and the fan-out: both sources report here; a report waits
//! for its twin from the other source at most the reconcile window, then the record gets its
//! catalog entry, decoded fields, driver version, incident and attribution, is logged, counted
//! and sent to the sinks at once. Unpaired reports while both sources run are counted (a
//! tracepoint that stopped firing, or a kernel log that dropped lines) and logged.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use gpuship_sinks::schema::{HostIdentity, KernelSuspect, XidRecord, XidSource};

use super::attribution::{Attributor, CudaActivity};
use super::catalog::{self, CATALOG_VERSION};
use super::details;
use super::incidents::{IncidentLinks, Incidents};
use super::reconcile::Reconciler;
use super::suspects;
use crate::accounting::Accounting;
use crate::batcher::xid_batch;
use crate::fanout::FanOut;
use crate::live::LiveTap;
use crate::sources::output::LaunchHistory;
use crate::summary::RunSummary;

/// Settings of the stage.
#[derive(Debug, Clone)]
pub struct XidStageSettings {
    /// How long a report waits for its twin.
    pub reconcile_window: Duration,
    /// Gap that ends an incident.
    pub incident_window: Duration,
    /// CUDA activity lookback, and how long failed calls link to an incident.
    pub attribution_window: Duration,
    /// The NVIDIA driver version, when known.
    pub driver_version: Option<String>,
    /// Most suspect kernels an XID lists (`[sources.xid] suspects`).
    pub suspects: usize,
}

struct Inner {
    reconciler: Reconciler,
    incidents: Incidents,
}

/// Shared by the capture threads.
pub struct XidStage {
    inner: Mutex<Inner>,
    identity: HostIdentity,
    settings: XidStageSettings,
    attributor: Attributor,
    fanout: FanOut,
    accounting: Arc<Accounting>,
    summary: Arc<Mutex<RunSummary>>,
    /// Processes with recent CUDA calls, fed by the consumer.
    pub activity: Arc<CudaActivity>,
    /// Incidents' affected processes, read by the consumer for failed calls.
    pub links: Arc<IncidentLinks>,
    finished: AtomicBool,
    /// The live view, told every XID as it goes to the sinks.
    live: Option<Arc<LiveTap>>,
    /// Kernel-log sequence numbers reported and not yet handed to the sinks (waiting for a
    /// twin, or being emitted): the kmsg cursor must not pass them.
    kmsg_unsettled: Mutex<BTreeMap<u64, usize>>,
    /// The CUDA source's launch history, once it runs: where suspects come from.
    launches: OnceLock<Arc<dyn LaunchHistory>>,
}

impl XidStage {
    /// A stage sending to `fanout`.
    pub fn new(
        identity: HostIdentity,
        settings: XidStageSettings,
        attributor: Attributor,
        fanout: FanOut,
        accounting: Arc<Accounting>,
        summary: Arc<Mutex<RunSummary>>,
    ) -> Self {
        Self {
            inner: Mutex::new(Inner {
                reconciler: Reconciler::new(settings.reconcile_window, false),
                incidents: Incidents::new(&identity.host, settings.incident_window),
            }),
            identity,
            settings,
            attributor,
            fanout,
            accounting,
            summary,
            activity: Arc::new(CudaActivity::default()),
            links: Arc::new(IncidentLinks::default()),
            finished: AtomicBool::new(false),
            live: None,
            kmsg_unsettled: Mutex::new(BTreeMap::new()),
            launches: OnceLock::new(),
        }
    }

    /// Where suspects come from from now on (the CUDA source registers its history once).
    pub fn set_launch_history(&self, history: Arc<dyn LaunchHistory>) {
        if self.launches.set(history).is_err() {
            tracing::debug!("a launch history was already registered; keeping the first");
        }
    }

    /// Also keeps every XID it emits in `live`.
    pub fn with_live(mut self, live: Arc<LiveTap>) -> Self {
        self.live = Some(live);
        self
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Both sources run: reports wait for their twins from now on.
    pub fn pair_sources(&self) {
        let mut inner = self.lock();
        inner.reconciler = Reconciler::new(self.settings.reconcile_window, true);
        tracing::info!(
            window_ms = self.settings.reconcile_window.as_millis() as u64,
            "XIDs from the tracepoint and the kernel log are reconciled into one row"
        );
    }

    /// The lowest kernel-log sequence number reported here and not yet handed to the sinks.
    pub fn oldest_unsettled_kmsg(&self) -> Option<u64> {
        self.unsettled().keys().next().copied()
    }

    fn unsettled(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, usize>> {
        self.kmsg_unsettled
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// A report from a source.
    pub fn report(&self, record: XidRecord) {
        if let Some(seq) = record.kmsg_seq {
            *self.unsettled().entry(seq).or_default() += 1;
        }
        let ready = {
            let mut inner = self.lock();
            let ready = inner.reconciler.offer(record, Instant::now());
            self.annotate(&mut inner, ready.into_iter().collect())
        };
        self.emit(ready);
    }

    /// Sends reports whose twin did not come in time.
    pub fn tick(&self) {
        let ready = {
            let mut inner = self.lock();
            let expired = inner.reconciler.expired(Instant::now());
            self.count_unpaired(&expired);
            self.annotate(&mut inner, expired)
        };
        self.emit(ready);
    }

    /// Sends everything still waiting; called once the sources have stopped.
    pub fn finish(&self) {
        if self.finished.swap(true, Ordering::AcqRel) {
            return;
        }
        let ready = {
            let mut inner = self.lock();
            let left = inner.reconciler.drain();
            self.annotate(&mut inner, left)
        };
        self.emit(ready);
    }

    fn count_unpaired(&self, expired: &[XidRecord]) {
        for record in expired {
            let counter = match record.source {
                XidSource::Tracepoint => &self.accounting.xid_unpaired_tracepoint,
                XidSource::Kmsg => &self.accounting.xid_unpaired_kmsg,
                XidSource::Both => continue,
            };
            counter.fetch_add(1, Ordering::Relaxed);
            let missing = if record.source == XidSource::Kmsg {
                "the tracepoint did not report it (tracepoint not firing, or its ring lost it)"
            } else {
                "the kernel log did not report it (log rate-limited or lines overwritten)"
            };
            tracing::warn!(code = record.code, pci_bus_id = %record.pci_bus_id, source = record.source.as_str(), "XID seen by one source only: {missing}");
        }
    }

    fn annotate(&self, inner: &mut Inner, mut records: Vec<XidRecord>) -> Vec<XidRecord> {
        for record in &mut records {
            let info = catalog::lookup(record.code);
            let annotations = &mut record.annotations;
            annotations.name = Some(info.name);
            annotations.category = Some(info.category.into());
            annotations.severity = Some(info.severity.into());
            annotations.action = Some(info.action.into());
            annotations.catalog_version = Some(CATALOG_VERSION.into());
            let mut decoded = details::decode(record.code, &record.message);
            decoded.mig_gpu_instance = annotations
                .details
                .mig_gpu_instance
                .or(decoded.mig_gpu_instance);
            decoded.mig_compute_instance = annotations
                .details
                .mig_compute_instance
                .or(decoded.mig_compute_instance);
            annotations.details = decoded;
            annotations.driver_version = self.settings.driver_version.clone();
            self.attributor.attribute(record, &self.activity);
            let history = self.launches.get().map(|h| &**h);
            record.annotations.suspects = suspects::find(record, history, self.settings.suspects);
            record.annotations.suspects_sampled = suspects::sampled(record, history);
            let incident = inner.incidents.assign(record);
            let window = gpuship_sinks::limits::nanos_i64(self.settings.attribution_window);
            let (from, until) = (
                record.time_ns.saturating_sub(window),
                record.time_ns.saturating_add(window),
            );
            for &pid in &record.annotations.affected_pids {
                self.links.link(pid, incident.clone(), from, until);
            }
            self.links.prune(from);
        }
        records
    }

    fn emit(&self, records: Vec<XidRecord>) {
        if records.is_empty() {
            return;
        }
        for record in &records {
            let a = &record.annotations;
            let pod = a
                .workload
                .as_deref()
                .and_then(|w| {
                    Some(format!(
                        "{}/{}",
                        w.pod_namespace.as_deref()?,
                        w.pod_name.as_deref()?
                    ))
                })
                .unwrap_or_default();
            tracing::warn!(
                code = record.code,
                name = a.name.as_deref().unwrap_or(""),
                severity = a.severity.as_deref().unwrap_or(""),
                action = a.action.as_deref().unwrap_or(""),
                pci_bus_id = %record.pci_bus_id,
                gpu_uuid = record.gpu.as_ref().map(|g| g.uuid.as_str()).unwrap_or(""),
                source = record.source.as_str(),
                pid = ?record.pid,
                comm = ?record.comm,
                pod,
                attribution = a.attribution.as_deref().unwrap_or(""),
                incident_id = a.incident_id.as_deref().unwrap_or(""),
                root_candidate = a.root_candidate.unwrap_or(false),
                suspect_kernel = %crate::escape::Escaped(
                    a.suspects
                        .as_deref()
                        .and_then(KernelSuspect::headline)
                        .map_or("", |s| s.kernel_name_demangled.as_str())
                ),
                message = %crate::escape::Escaped(&record.message),
                "XID"
            );
            if let Ok(mut summary) = self.summary.lock() {
                summary.record_xid(record.code, record.source.as_str());
            }
        }
        if let Some(live) = &self.live {
            live.record_xids(&records);
        }
        if let Some(batch) = xid_batch(&self.identity, &records) {
            self.accounting.batched.add(batch.kind, batch.len() as u64);
            self.fanout.send_blocking(batch);
        }
        // Handed to every sink (and journaled by those with a spool): the cursor may pass them.
        let mut unsettled = self.unsettled();
        for seq in records.iter().filter_map(|r| r.kmsg_seq) {
            if let Some(count) = unsettled.get_mut(&seq) {
                *count -= 1;
                if *count == 0 {
                    unsettled.remove(&seq);
                }
            }
        }
    }
}
