//! The `/live` document on the wire (schema version [`LIVE_VERSION`]): the lists the daemon
//! serializes and `top` deserializes with the same definitions, and the reader's view of the
//! whole document ([`LiveReport`]).
//!
//! Fields are only ever added within a version; a reader ignores the ones it does not know.
//! The daemon builds the document from its own state (its `live` module, with the accounting
//! snapshot as it is); this module holds no daemon type and must not grow one, so that `top`
//! builds without the daemon.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Version of the `/live` document; bumped when a field changes meaning or goes away.
pub const LIVE_VERSION: u32 = 1;

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

/// The `/live` document as `top` reads it (unknown fields are ignored).
#[derive(Debug, Clone, Deserialize)]
pub struct LiveReport {
    /// Schema version.
    pub version: u32,
    /// The agent's version.
    #[serde(default)]
    pub agent_version: String,
    /// Seconds since the agent started.
    pub uptime_s: f64,
    /// Per-function totals.
    pub functions: Vec<FunctionLive>,
    /// Per-process totals.
    pub processes: Vec<ProcessLive>,
    /// Processes the agent forgot to stay bounded.
    #[serde(default)]
    pub processes_evicted: u64,
    /// XIDs since start.
    #[serde(default)]
    pub xids_total: u64,
    /// The latest XIDs, oldest first.
    pub xids: Vec<XidLive>,
    /// The agent's counters.
    pub accounting: AccountingReport,
}

/// The counters `top` shows (the daemon's accounting snapshot, read in part).
#[derive(Debug, Clone, Default, Deserialize)]
pub struct AccountingReport {
    /// Per ring.
    #[serde(default)]
    pub rings: Vec<RingReport>,
    /// Kernel log.
    #[serde(default)]
    pub kmsg: KmsgReport,
    /// Per sink and kind.
    #[serde(default)]
    pub sinks: Vec<SinkReport>,
}

/// One ring's counters.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct RingReport {
    /// `xid`, `cuda` or `driver`.
    pub ring: String,
    /// Lost in the kernel: the ring was full.
    pub lost_in_kernel: u64,
    /// Taken off the ring.
    pub received: u64,
    /// Malformed records.
    pub decode_errors: u64,
    /// CUDA returns without their entry.
    pub unmatched_returns: u64,
    /// CUDA calls not recorded: in-flight table full.
    pub inflight_full: u64,
}

/// Kernel-log counters.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct KmsgReport {
    /// XID lines read.
    pub xids: u64,
    /// Unparseable XID lines.
    pub parse_errors: u64,
    /// Records overwritten before they were read.
    pub lost_gaps: u64,
}

/// One sink's counters for one kind.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct SinkReport {
    /// Sink name.
    pub sink: String,
    /// Event kind.
    pub kind: String,
    /// Acknowledged by the destination.
    pub delivered: u64,
    /// Dropped before the destination.
    pub dropped: u64,
    /// By reason.
    pub dropped_by_reason: BTreeMap<String, u64>,
    /// Lost to destination errors.
    pub failed: u64,
    /// Waiting in the sink's queue (all kinds; repeated on each kind's row).
    pub queued_events: u64,
}
