//! `cuda_memory` rows: the memory a process held on a GPU when the agent took its figures
//! (every `stats_interval_secs`), for the report's incidents.

use arrow_array::types::{Int32Type, UInt64Type};
use arrow_array::{Array, BooleanArray, Int32Array, RecordBatch, UInt64Array};

use super::{text, value, Columns};
use crate::views::text::Text;

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

/// One batch of `cuda_memory` rows with its columns resolved once: a reader that keeps few of
/// many rows (the report's incidents) checks a row's key before it builds the row.
pub struct MemoryBatch<'a> {
    times: Vec<Option<i64>>,
    host: Option<Text<'a>>,
    pid: Option<&'a Int32Array>,
    comm: Option<Text<'a>>,
    gpu_uuid: Option<Text<'a>>,
    pci_bus_id: Option<Text<'a>>,
    gpu_index: Option<&'a Int32Array>,
    bytes: [Option<&'a UInt64Array>; 6],
    seen_from_start: Option<&'a BooleanArray>,
}

impl<'a> MemoryBatch<'a> {
    pub fn new(batch: &'a RecordBatch) -> Self {
        let c = Columns(batch);
        let bytes = |name: &str| c.primitive::<UInt64Type>(name);
        Self {
            times: c.times(),
            host: c.strings("host"),
            pid: c.primitive::<Int32Type>("pid"),
            comm: c.strings("comm"),
            gpu_uuid: c.strings("gpu_uuid"),
            pci_bus_id: c.strings("pci_bus_id"),
            gpu_index: c.primitive::<Int32Type>("gpu_index"),
            bytes: [
                "device_bytes",
                "managed_bytes",
                "host_pinned_bytes",
                "pool_bytes",
                "physical_bytes",
                "allocations",
            ]
            .map(bytes),
            seen_from_start: c.booleans("seen_from_start"),
        }
    }

    pub fn len(&self) -> usize {
        self.times.len()
    }

    pub fn is_empty(&self) -> bool {
        self.times.is_empty()
    }

    /// Row `i`'s time, host ("" when null) and pid; None without a time or a pid.
    pub fn key(&self, i: usize) -> Option<(i64, &'a str, i32)> {
        let host = self
            .host
            .filter(|h| h.is_valid(i))
            .map_or("", |h| h.value(i));
        Some((self.times[i]?, host, value(self.pid, i)?))
    }

    /// Row `i`'s GPU: its index and UUID.
    pub fn gpu(&self, i: usize) -> (Option<i32>, Option<&'a str>) {
        (
            value(self.gpu_index, i),
            self.gpu_uuid.filter(|u| u.is_valid(i)).map(|u| u.value(i)),
        )
    }

    /// Row `i`; None without a time or a pid.
    pub fn row(&self, i: usize) -> Option<MemoryHeld> {
        let (time_ns, host, pid) = self.key(i)?;
        let [device, managed, pinned, pool, physical, allocations] =
            self.bytes.map(|column| value(column, i).unwrap_or(0));
        Some(MemoryHeld {
            time_ns,
            host: host.to_string(),
            pid,
            comm: text(self.comm, i).unwrap_or_default(),
            gpu_uuid: text(self.gpu_uuid, i),
            pci_bus_id: text(self.pci_bus_id, i),
            gpu_index: value(self.gpu_index, i),
            device_bytes: device,
            managed_bytes: managed,
            host_pinned_bytes: pinned,
            pool_bytes: pool,
            physical_bytes: physical,
            allocations,
            seen_from_start: self
                .seen_from_start
                .is_some_and(|f| f.is_valid(i) && f.value(i)),
        })
    }
}

/// Every row of `batches` with a time and a pid, by time and pid.
pub fn memory_held(batches: &[RecordBatch]) -> Vec<MemoryHeld> {
    let mut rows: Vec<MemoryHeld> = batches
        .iter()
        .flat_map(|batch| {
            let rows = MemoryBatch::new(batch);
            (0..rows.len()).filter_map(move |i| rows.row(i))
        })
        .collect();
    rows.sort_by_key(|r| (r.time_ns, r.pid));
    rows
}
