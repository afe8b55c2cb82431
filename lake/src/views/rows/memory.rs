//! `cuda_memory` rows: the memory a process held on a GPU when the agent took its figures
//! (every `stats_interval_secs`), for the report's incidents.

use arrow_array::types::{Int32Type, UInt64Type};
use arrow_array::RecordBatch;

use super::{text, value, Columns};

/// One `cuda_memory` row. Each field is the column of the same name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryHeld {
    pub time_ns: i64,
    pub host: String,
    pub pid: i32,
    pub comm: String,
    pub gpu_uuid: Option<String>,
    pub pci_bus_id: Option<String>,
    pub gpu_index: Option<i32>,
    pub device_bytes: u64,
    pub managed_bytes: u64,
    pub host_pinned_bytes: u64,
    pub pool_bytes: u64,
    pub physical_bytes: u64,
    pub allocations: u64,
    /// Every allocation of the process was seen: not a lower bound.
    pub seen_from_start: bool,
}

/// The columns [`memory_held`] reads.
pub const MEMORY_COLUMNS: &[&str] = &[
    "time",
    "time_ns",
    "host",
    "pid",
    "comm",
    "gpu_uuid",
    "pci_bus_id",
    "gpu_index",
    "device_bytes",
    "managed_bytes",
    "host_pinned_bytes",
    "pool_bytes",
    "physical_bytes",
    "allocations",
    "seen_from_start",
];

/// Every row of `batches` with a time and a pid.
pub fn memory_held(batches: &[RecordBatch]) -> Vec<MemoryHeld> {
    let mut rows = Vec::new();
    for batch in batches {
        let c = Columns(batch);
        let bytes = |name: &str, i: usize| value(c.primitive::<UInt64Type>(name), i).unwrap_or(0);
        for (i, time_ns) in c.times().into_iter().enumerate() {
            let (Some(time_ns), Some(pid)) = (time_ns, value(c.primitive::<Int32Type>("pid"), i))
            else {
                continue;
            };
            rows.push(MemoryHeld {
                time_ns,
                host: text(c.strings("host"), i).unwrap_or_default(),
                pid,
                comm: text(c.strings("comm"), i).unwrap_or_default(),
                gpu_uuid: text(c.strings("gpu_uuid"), i),
                pci_bus_id: text(c.strings("pci_bus_id"), i),
                gpu_index: value(c.primitive::<Int32Type>("gpu_index"), i),
                device_bytes: bytes("device_bytes", i),
                managed_bytes: bytes("managed_bytes", i),
                host_pinned_bytes: bytes("host_pinned_bytes", i),
                pool_bytes: bytes("pool_bytes", i),
                physical_bytes: bytes("physical_bytes", i),
                allocations: bytes("allocations", i),
                seen_from_start: c.flag("seen_from_start", i) == Some(true),
            });
        }
    }
    rows.sort_by_key(|r| (r.time_ns, r.pid));
    rows
}
