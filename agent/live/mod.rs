//! The live tap: what `gpuship top` shows, kept by the running agent and served as JSON on
//! `GET /live` of the metrics server.
//!
//! Totals since start per CUDA function (calls, failed calls, summed durations), per process
//! (calls, failed calls; at most [`MAX_PROCESSES`], least recently seen forgotten first), and
//! the latest [`MAX_XIDS`] XIDs. Readers compute rates from the difference of two reads.
//!
//! It must not slow the consumer: per call it adds the counting in
//! [`crate::summary::CallTally`] (already there for the end-of-run summary), a pid comparison
//! ([`ProcessTally`]) and a counter that looks at the clock every 1,024 calls; the shared state
//! is locked once per publication, at most every [`PUBLISH_INTERVAL`], never per call. It keeps
//! no history: the view is about one publication interval behind the rings, and a restart
//! starts from zero.

mod processes;
mod schema;

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use gpuship_sinks::schema::XidRecord;

use crate::accounting::Snapshot;
use crate::health::xids::XidCounts;
use crate::health::{GpuMemoryHealth, HealthSnapshot};
use crate::sources::functions::FunctionTable;
use crate::summary::{CallTally, FunctionCounts};

pub use processes::{ProcessDelta, ProcessTable, ProcessTally, ProcessTotals};
pub use schema::{xid_live, FunctionLive, LiveSnapshot, ProcessLive, XidLive, LIVE_VERSION};

/// Processes the tap keeps totals for.
pub const MAX_PROCESSES: usize = 4096;
/// XIDs the tap keeps.
pub const MAX_XIDS: usize = 50;
/// How often the consumer publishes its counts.
pub const PUBLISH_INTERVAL: Duration = Duration::from_millis(50);
/// Calls between two looks at the clock inside one ring drain (under sustained load a drain
/// can last longer than [`PUBLISH_INTERVAL`]).
const CALLS_PER_CLOCK_CHECK: u32 = 1024;

/// The shared live state; one per agent.
pub struct LiveTap {
    started: Instant,
    started_at: SystemTime,
    shared: Mutex<Shared>,
}

struct Shared {
    names: FunctionTable,
    functions: Vec<FunctionCounts>,
    failures: BTreeMap<(u32, u32), u64>,
    xid_counts: XidCounts,
    processes: ProcessTable,
    xids: VecDeque<XidLive>,
    xids_total: u64,
    memory: Vec<GpuMemoryHealth>,
}

impl Default for LiveTap {
    fn default() -> Self {
        Self::new()
    }
}

impl LiveTap {
    /// An empty tap; uptime counts from now.
    pub fn new() -> Self {
        Self {
            started: Instant::now(),
            started_at: SystemTime::now(),
            shared: Mutex::new(Shared {
                names: FunctionTable::default(),
                functions: Vec::new(),
                failures: BTreeMap::new(),
                xid_counts: XidCounts::default(),
                processes: ProcessTable::new(MAX_PROCESSES),
                xids: VecDeque::with_capacity(MAX_XIDS),
                xids_total: 0,
                memory: Vec::new(),
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Shared> {
        // Counters stay meaningful even if a holder panicked.
        self.shared.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Replaces the function and failure totals and adds the processes' deltas.
    pub fn publish(
        &self,
        names: &FunctionTable,
        calls: &CallTally,
        processes: impl Iterator<Item = (i32, ProcessDelta)>,
    ) {
        let mut shared = self.lock();
        if shared.names.len() != names.len() {
            shared.names = names.clone();
        }
        shared.functions.clear();
        shared.functions.extend_from_slice(calls.by_function());
        if shared.failures != *calls.failures() {
            shared.failures.clone_from(calls.failures());
        }
        shared.processes.add(processes);
    }

    /// The GPU-health counts (`/metrics`, OTLP metrics).
    pub fn health(&self) -> HealthSnapshot {
        let shared = self.lock();
        let mut health = HealthSnapshot::new(
            self.started_at,
            shared.xid_counts.clone(),
            &shared.names,
            &shared.functions,
            &shared.failures,
        );
        health.memory.clone_from(&shared.memory);
        health
    }

    /// Replaces the memory held per GPU (at most `MAX_MEMORY_GPUS` kept).
    pub fn publish_memory(&self, mut held: Vec<GpuMemoryHealth>) {
        held.sort();
        held.truncate(crate::health::MAX_MEMORY_GPUS);
        self.lock().memory = held;
    }

    /// Keeps XIDs as they go to the sinks (annotated).
    pub fn record_xids(&self, records: &[XidRecord]) {
        let mut shared = self.lock();
        for record in records {
            if shared.xids.len() == MAX_XIDS {
                shared.xids.pop_front();
            }
            shared.xids.push_back(xid_live(record));
            shared.xids_total += 1;
            shared.xid_counts.record(record);
        }
    }

    /// The document `/live` serves, with `accounting` read by the caller.
    pub fn snapshot(&self, accounting: Snapshot) -> LiveSnapshot {
        let uptime_s = self.started.elapsed().as_secs_f64();
        let shared = self.lock();
        let functions = shared
            .functions
            .iter()
            .enumerate()
            .filter(|(_, c)| c.calls > 0)
            .map(|(id, c)| FunctionLive {
                function: shared
                    .names
                    .name(id as u32)
                    .unwrap_or("unknown")
                    .to_string(),
                calls: c.calls,
                errors: c.errors,
                duration_ns_sum: c.duration_ns,
            })
            .collect();
        let processes = shared
            .processes
            .totals()
            .into_iter()
            .map(|p| ProcessLive {
                pid: p.pid,
                comm: p.comm,
                calls: p.calls,
                errors: p.errors,
            })
            .collect();
        LiveSnapshot {
            version: LIVE_VERSION,
            agent_version: env!("CARGO_PKG_VERSION"),
            uptime_s,
            functions,
            processes,
            processes_evicted: shared.processes.evicted(),
            xids_total: shared.xids_total,
            xids: shared.xids.iter().cloned().collect(),
            accounting,
        }
    }

    /// [`Self::snapshot`] as JSON.
    pub fn json(&self, accounting: Snapshot) -> String {
        serde_json::to_string(&self.snapshot(accounting))
            .unwrap_or_else(|err| format!("{{\"version\":{LIVE_VERSION},\"error\":\"{err}\"}}"))
    }
}

/// The consumer thread's side: per-process counting, and publication of its counts.
#[derive(Debug)]
pub struct LivePublisher {
    names: FunctionTable,
    processes: ProcessTally,
    last: Option<Instant>,
    /// Calls since the last [`Self::publish`] call.
    unchecked: u32,
}

impl LivePublisher {
    /// A publisher naming function ids with `names`.
    pub fn new(names: FunctionTable) -> Self {
        Self {
            names,
            processes: ProcessTally::default(),
            last: None,
            unchecked: 0,
        }
    }

    /// Names function ids with `names` from now on (a CUDA library found later brought more).
    pub fn set_names(&mut self, names: FunctionTable) {
        self.names = names;
    }

    /// Counts one call of process `pid`. True every [`CALLS_PER_CLOCK_CHECK`] calls: the
    /// caller then offers a publication, so that a long drain does not freeze the view.
    #[inline]
    pub fn record(&mut self, pid: i32, comm: &[i8], failed: bool) -> bool {
        self.processes.record(pid, comm, failed);
        self.unchecked += 1;
        self.unchecked >= CALLS_PER_CLOCK_CHECK
    }

    /// Counts `calls` successful calls of process `pid` that arrived as statistics.
    pub fn record_many(&mut self, pid: i32, comm: &[i8], calls: u64) {
        self.processes.record_many(pid, comm, calls);
    }

    /// Publishes to `tap` when [`PUBLISH_INTERVAL`] has passed since the last time, or when
    /// `now_anyway`.
    pub fn publish(&mut self, calls: &CallTally, tap: &LiveTap, now: Instant, now_anyway: bool) {
        self.unchecked = 0;
        let recent = |last: Instant| now.saturating_duration_since(last) < PUBLISH_INTERVAL;
        if !now_anyway && self.last.is_some_and(recent) {
            return;
        }
        self.last = Some(now);
        tap.publish(&self.names, calls, self.processes.drain());
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use gpuship_sinks::schema::{CudaRow, GpuIdentity, XidSource};
    use gpuship_sinks::SinkStats;
    use serde_json::json;

    use super::*;
    use crate::accounting::Accounting;

    fn row(result: u32, duration_ns: u64) -> CudaRow<'static> {
        CudaRow {
            time_ns: 0,
            pid: 7,
            tid: 7,
            comm: "trainer",
            function: "f",
            duration_ns,
            result,
            result_name: "",
            bytes: None,
            device_ptr: None,
            stream: None,
            launch: None,
            workload: None,
            objects: Default::default(),
        }
    }

    fn comm(name: &str) -> Vec<i8> {
        name.bytes().map(|b| b as i8).collect()
    }

    #[test]
    fn live_json_has_functions_processes_xids_and_accounting() {
        let tap = LiveTap::new();
        let names = FunctionTable::from_names(["cuInit", "cuMemAlloc_v2", "cuLaunchKernel"]);
        let mut publisher = LivePublisher::new(names);
        let mut calls = CallTally::default();
        for (id, result, duration) in [(1, 0, 100), (1, 2, 300), (2, 0, 0), (2, 0, 0)] {
            calls.record(id, &row(result, duration));
            publisher.record(7, &comm("trainer"), result != 0);
        }
        assert!(!publisher.record(9, &comm("python3"), false));
        let start = Instant::now();
        publisher.publish(&calls, &tap, start, false);
        // Within the interval nothing is published, unless asked.
        publisher.record(9, &comm("python3"), false);
        publisher.publish(&calls, &tap, start + Duration::from_millis(1), false);
        assert_eq!(
            tap.snapshot(Accounting::default().snapshot()).processes[1].calls,
            1
        );
        publisher.publish(&calls, &tap, start + Duration::from_millis(2), true);
        let due: Vec<bool> = (0..CALLS_PER_CLOCK_CHECK)
            .map(|_| publisher.record(11, &comm("x"), false))
            .collect();
        assert_eq!(
            due.iter().position(|d| *d),
            Some(CALLS_PER_CLOCK_CHECK as usize - 1)
        );
        publisher.publish(&calls, &tap, start + Duration::from_millis(3), false);
        assert!(
            !publisher.record(11, &comm("x"), false),
            "the count starts again"
        );

        let mut xid = XidRecord::new(XidSource::Kmsg);
        xid.time_ns = 1_700_000_000_000_000_000;
        xid.code = 79;
        xid.pci_bus_id = "0000:3b:00.0".into();
        xid.message = "GPU has fallen off the bus.".into();
        xid.pid = Some(7);
        xid.comm = Some("trainer".into());
        xid.gpu = Some(Arc::new(GpuIdentity {
            uuid: "GPU-3b".into(),
            model: "NVIDIA H100".into(),
            index: 0,
            minor: Some(0),
        }));
        tap.record_xids(&[xid]);

        let accounting = Accounting::default();
        accounting.add_sink("parquet", Arc::new(SinkStats::default()), false);
        let json: serde_json::Value =
            serde_json::from_str(&tap.json(accounting.snapshot())).expect("valid JSON");
        assert_eq!(json["version"], 1);
        assert!(json["uptime_s"].as_f64().is_some_and(|s| s >= 0.0));
        assert_eq!(
            json["functions"],
            json!([
                {"function": "cuMemAlloc_v2", "calls": 2, "errors": 1, "duration_ns_sum": 400},
                {"function": "cuLaunchKernel", "calls": 2, "errors": 0, "duration_ns_sum": 0},
            ])
        );
        assert_eq!(
            json["processes"],
            json!([
                {"pid": 7, "comm": "trainer", "calls": 4, "errors": 1},
                {"pid": 9, "comm": "python3", "calls": 2, "errors": 0},
            ])
        );
        assert_eq!(json["processes_evicted"], 0);
        assert_eq!(json["xids_total"], 1);
        assert_eq!(
            json["xids"],
            json!([{
                "time_ns": 1_700_000_000_000_000_000i64, "code": 79,
                "name": "GPU fell off the PCIe bus", "category": "hardware",
                "severity": "fatal", "action": "reboot_node", "pci_bus_id": "0000:3b:00.0",
                "gpu_uuid": "GPU-3b", "gpu_index": 0, "pid": 7, "comm": "trainer",
                "message": "GPU has fallen off the bus.", "source": "kmsg",
            }])
        );
        let rings = json["accounting"]["rings"].as_array().expect("rings");
        assert_eq!(rings.len(), 3);
        assert_eq!(rings[1]["ring"], "cuda");
        assert_eq!(rings[1]["lost_in_kernel"], 0);
        let sink = &json["accounting"]["sinks"][0];
        assert_eq!(sink["sink"], "parquet");
        assert_eq!(sink["dropped_by_reason"]["buffer_full"], 0);
        assert_eq!(sink["queued_events"], 0);
    }

    #[test]
    fn only_the_latest_xids_are_kept() {
        let tap = LiveTap::new();
        for code in 0..(MAX_XIDS as u32 + 5) {
            let mut xid = XidRecord::new(XidSource::Tracepoint);
            xid.code = code;
            tap.record_xids(&[xid]);
        }
        let snapshot = tap.snapshot(Accounting::default().snapshot());
        assert_eq!(snapshot.xids_total, MAX_XIDS as u64 + 5);
        assert_eq!(snapshot.xids.len(), MAX_XIDS);
        assert_eq!(snapshot.xids[0].code, 5);
        // Codes the catalog does not know still get a name.
        assert!(!snapshot.xids[0].name.is_empty());
    }
}
