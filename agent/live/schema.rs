//! The JSON document `GET /live` answers (schema version [`LIVE_VERSION`]). Fields are only
//! ever added within a version; a reader ignores the ones it does not know. The list types
//! also deserialize, so `gpuship top` reads them with the same definitions.

use gpuship_sinks::schema::XidRecord;
use serde::{Deserialize, Serialize};

use crate::accounting::Snapshot;
use crate::xid::catalog;

/// Version of the `/live` document; bumped when a field changes meaning or goes away.
pub const LIVE_VERSION: u32 = 1;

/// The whole `/live` document.
#[derive(Debug, Clone, Serialize)]
pub struct LiveSnapshot {
    /// [`LIVE_VERSION`].
    pub version: u32,
    /// The agent's version.
    pub agent_version: &'static str,
    /// Seconds since the agent started capturing; readers divide count differences by
    /// differences of this (the agent's clock, not the reader's).
    pub uptime_s: f64,
    /// Per CUDA function with at least one call, since start.
    pub functions: Vec<FunctionLive>,
    /// Per process with at least one CUDA call, since start, most calls first (at most
    /// `MAX_PROCESSES`, least recently seen forgotten first).
    pub processes: Vec<ProcessLive>,
    /// Processes forgotten to stay within `MAX_PROCESSES`.
    pub processes_evicted: u64,
    /// XIDs since start.
    pub xids_total: u64,
    /// The latest XIDs (at most `MAX_XIDS`), oldest first.
    pub xids: Vec<XidLive>,
    /// The agent's counters, as in `--summary-json`.
    pub accounting: Snapshot,
}

/// One CUDA function's totals.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FunctionLive {
    /// Exported symbol name.
    pub function: String,
    /// Calls recorded.
    pub calls: u64,
    /// Calls that returned an error CUresult.
    pub errors: u64,
    /// Sum of durations in nanoseconds (0 for entry-only functions).
    pub duration_ns_sum: u64,
}

/// One process's totals.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessLive {
    /// Process id.
    pub pid: i32,
    /// Latest task name seen making calls.
    pub comm: String,
    /// CUDA calls.
    pub calls: u64,
    /// Failed CUDA calls.
    pub errors: u64,
}

/// One XID as the sinks got it, reduced to what a person scans.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct XidLive {
    /// Nanoseconds since the Unix epoch.
    pub time_ns: i64,
    /// The XID number.
    pub code: u32,
    /// Catalog name.
    pub name: String,
    /// Catalog category.
    pub category: String,
    /// Catalog severity.
    pub severity: String,
    /// Recommended action.
    pub action: String,
    /// PCI bus id of the GPU.
    pub pci_bus_id: String,
    /// The GPU's UUID, when known.
    pub gpu_uuid: Option<String>,
    /// The GPU's index, when known.
    pub gpu_index: Option<i32>,
    /// The process the driver named.
    pub pid: Option<i32>,
    /// Its name.
    pub comm: Option<String>,
    /// The driver's message.
    pub message: String,
    /// `tracepoint`, `kmsg` or `both`.
    pub source: String,
}

impl XidLive {
    /// The live view of an annotated record (the catalog fills what annotation left out).
    pub fn from_record(record: &XidRecord) -> Self {
        let a = &record.annotations;
        let info = || catalog::lookup(record.code);
        Self {
            time_ns: record.time_ns,
            code: record.code,
            name: a.name.clone().unwrap_or_else(|| info().name),
            category: a.category.clone().unwrap_or_else(|| info().category.into()),
            severity: a.severity.clone().unwrap_or_else(|| info().severity.into()),
            action: a.action.clone().unwrap_or_else(|| info().action.into()),
            pci_bus_id: record.pci_bus_id.clone(),
            gpu_uuid: record.gpu.as_ref().map(|g| g.uuid.clone()),
            gpu_index: record.gpu.as_ref().map(|g| g.index),
            pid: record.pid,
            comm: record.comm.clone(),
            message: record.message.clone(),
            source: record.source.as_str().into(),
        }
    }
}
