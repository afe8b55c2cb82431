//! Typed rows out of the lake's record batches, for the views. Columns are looked up by name
//! and a column that is missing or of another type reads as null, so files of older schema
//! versions (and other writers') still show what they have. Rows without the columns that
//! identify them (time, pid, function, code, ...) are left out.

use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, Int64Type, TimestampMicrosecondType, UInt32Type, UInt64Type};
use arrow_array::{Array, ArrowPrimitiveType, BooleanArray, PrimitiveArray, RecordBatch};

use super::text::Text;

mod driver;
mod memory;
mod nested;

pub use driver::{driver_ops, DriverOp};
pub use memory::{memory_held, MemoryBatch, MemoryHeld, MEMORY_COLUMNS};
pub use nested::{headline, Allocation, Held, Suspect};

/// Result name of entry-only calls (`[sources.cuda] entry_only`): no duration, no result.
pub const NOT_CAPTURED: &str = "NOT_CAPTURED";

/// One CUDA driver API call (`cuda` table). Each field is the column of the same name
/// (`docs/schema.md`); `time_ns` falls back to `time`, and `grid`/`block` gather the
/// `grid_*`/`block_*` columns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CudaCall {
    pub time_ns: i64,
    pub host: String,
    pub pid: i32,
    pub tid: i32,
    pub comm: String,
    pub function: String,
    pub duration_ns: u64,
    pub result: u32,
    pub result_name: String,
    pub bytes: Option<u64>,
    pub device_ptr: Option<u64>,
    pub stream: Option<u64>,
    pub grid: Option<[u32; 3]>,
    pub block: Option<[u32; 3]>,
    pub shared_mem_bytes: Option<u32>,
    pub incident_id: Option<String>,
    /// Kept by the flight recorder and written when `incident_id` started: a copy of a call
    /// counted elsewhere (null, in files before schema version 4, reads as false).
    pub flight_recorder: bool,
    /// The kernel a launch ran, demangled (`kernel_name_demangled`, schema version 5).
    pub kernel: Option<String>,
    /// The GPU it ran on (`gpu_uuid`, `pci_bus_id`, `gpu_index`; schema version 6).
    pub gpu_uuid: Option<String>,
    pub pci_bus_id: Option<String>,
    pub gpu_index: Option<i32>,
    /// On an allocation that failed out of memory: what the process held on that GPU
    /// (`held_memory`) and its largest allocations there (`largest_allocations`).
    pub held: Option<Held>,
    pub largest_allocations: Vec<Allocation>,
}

impl CudaCall {
    /// Recorded at entry only: no duration or result was captured.
    pub fn entry_only(&self) -> bool {
        self.result_name == NOT_CAPTURED
    }

    /// Returned something other than CUDA_SUCCESS.
    pub fn failed(&self) -> bool {
        self.result != 0 && !self.entry_only()
    }
}

/// One XID report (`xid` table). Each field is the column of the same name (`name` is
/// `xid_name`); the `display_*` methods fill what older files lack from the built-in catalog.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Xid {
    pub time_ns: i64,
    pub host: String,
    pub code: u32,
    pub pci_bus_id: String,
    pub gpu_uuid: Option<String>,
    pub gpu_model: Option<String>,
    pub gpu_index: Option<i32>,
    pub message: String,
    pub source: Option<String>,
    pub pid: Option<i32>,
    pub comm: Option<String>,
    pub name: Option<String>,
    pub severity: Option<String>,
    pub action: Option<String>,
    pub incident_id: Option<String>,
    pub root_candidate: Option<bool>,
    pub attribution: Option<String>,
    pub affected_pids: Vec<i32>,
    /// `namespace/name` of the attributed process's Kubernetes pod (`pod_namespace`,
    /// `pod_name`; schema version 3).
    pub pod: Option<String>,
    /// The attributed process's container (`container_id`).
    pub container_id: Option<String>,
    /// The first kernel the XID's suspects list (`suspect_kernel`, schema version 5).
    pub suspect_kernel: Option<String>,
    /// The kernels the process launched last before it, most recent first (`suspects`).
    pub suspects: Vec<Suspect>,
    /// Whether the overhead budget sampled the process's launches before it
    /// (`suspects_sampled`, schema version 7).
    pub suspects_sampled: Option<bool>,
}

impl Xid {
    /// The catalog name, from the row or (older files) from the built-in catalog.
    pub fn display_name(&self) -> String {
        self.name
            .clone()
            .unwrap_or_else(|| crate::catalog::lookup(self.code).name)
    }

    /// The severity, from the row or (older files) from the built-in catalog.
    pub fn display_severity(&self) -> String {
        self.severity
            .clone()
            .unwrap_or_else(|| crate::catalog::lookup(self.code).severity.to_string())
    }

    /// The recommended action, from the row or (older files) from the built-in catalog.
    pub fn display_action(&self) -> String {
        self.action
            .clone()
            .unwrap_or_else(|| crate::catalog::lookup(self.code).action.to_string())
    }
}

/// Column accessors of one batch (also for [`super::cuda_stats`]).
pub(super) struct Columns<'a>(pub(super) &'a RecordBatch);

impl<'a> Columns<'a> {
    pub(super) fn primitive<T: ArrowPrimitiveType>(
        &self,
        name: &str,
    ) -> Option<&'a PrimitiveArray<T>> {
        self.0.column_by_name(name)?.as_primitive_opt::<T>()
    }

    pub(super) fn strings(&self, name: &str) -> Option<Text<'a>> {
        Text::of(self.0.column_by_name(name)?.as_ref())
    }

    pub(super) fn booleans(&self, name: &str) -> Option<&'a BooleanArray> {
        self.0.column_by_name(name)?.as_boolean_opt()
    }

    /// The flag `name` of row `i`; None when null or absent.
    fn flag(&self, name: &str, i: usize) -> Option<bool> {
        self.booleans(name)
            .filter(|a| a.is_valid(i))
            .map(|a| a.value(i))
    }

    /// Nanoseconds since the epoch, from `time_ns`, else from `time` (µs).
    pub(super) fn times(&self) -> Vec<Option<i64>> {
        if let Some(ns) = self.primitive::<Int64Type>("time_ns") {
            return ns.iter().collect();
        }
        match self.primitive::<TimestampMicrosecondType>("time") {
            Some(us) => us
                .iter()
                .map(|t| t.map(|t| t.saturating_mul(1_000)))
                .collect(),
            None => vec![None; self.0.num_rows()],
        }
    }
}

pub(super) fn value<T: ArrowPrimitiveType>(
    array: Option<&PrimitiveArray<T>>,
    i: usize,
) -> Option<T::Native> {
    array.filter(|a| a.is_valid(i)).map(|a| a.value(i))
}

pub(super) fn text(array: Option<Text<'_>>, i: usize) -> Option<String> {
    array
        .filter(|a| a.is_valid(i))
        .map(|a| a.value(i).to_string())
}

fn dims(c: &Columns<'_>, names: [&str; 3], i: usize) -> Option<[u32; 3]> {
    let [x, y, z] = names.map(|n| value(c.primitive::<UInt32Type>(n), i));
    Some([x?, y?, z?])
}

/// Every call in `batches`.
pub fn cuda_calls(batches: &[RecordBatch]) -> Vec<CudaCall> {
    let mut calls = Vec::new();
    for batch in batches {
        let c = Columns(batch);
        let times = c.times();
        let (pid, tid) = (
            c.primitive::<Int32Type>("pid"),
            c.primitive::<Int32Type>("tid"),
        );
        let (host, comm, function) = (c.strings("host"), c.strings("comm"), c.strings("function"));
        let duration = c.primitive::<UInt64Type>("duration_ns");
        let (result, result_name) = (
            c.primitive::<UInt32Type>("result"),
            c.strings("result_name"),
        );
        for (i, time_ns) in times.into_iter().enumerate() {
            let (Some(time_ns), Some(pid), Some(function)) =
                (time_ns, value(pid, i), text(function, i))
            else {
                continue;
            };
            calls.push(CudaCall {
                time_ns,
                host: text(host, i).unwrap_or_default(),
                pid,
                tid: value(tid, i).unwrap_or(pid),
                comm: text(comm, i).unwrap_or_default(),
                function,
                duration_ns: value(duration, i).unwrap_or(0),
                result: value(result, i).unwrap_or(0),
                result_name: text(result_name, i).unwrap_or_default(),
                bytes: value(c.primitive::<UInt64Type>("bytes"), i),
                device_ptr: value(c.primitive::<UInt64Type>("device_ptr"), i),
                stream: value(c.primitive::<UInt64Type>("stream"), i),
                grid: dims(&c, ["grid_x", "grid_y", "grid_z"], i),
                block: dims(&c, ["block_x", "block_y", "block_z"], i),
                shared_mem_bytes: value(c.primitive::<UInt32Type>("shared_mem_bytes"), i),
                incident_id: text(c.strings("incident_id"), i),
                flight_recorder: c.flag("flight_recorder", i) == Some(true),
                kernel: text(c.strings("kernel_name_demangled"), i),
                gpu_uuid: text(c.strings("gpu_uuid"), i),
                pci_bus_id: text(c.strings("pci_bus_id"), i),
                gpu_index: value(c.primitive::<Int32Type>("gpu_index"), i),
                held: nested::held(batch, i),
                largest_allocations: nested::largest_allocations(batch, i),
            });
        }
    }
    calls.sort_by_key(|c| (c.time_ns, c.pid, c.tid));
    calls
}

/// Every XID in `batches`.
pub fn xids(batches: &[RecordBatch]) -> Vec<Xid> {
    let mut xids = Vec::new();
    for batch in batches {
        let c = Columns(batch);
        let affected = batch
            .column_by_name("affected_pids")
            .and_then(|a| a.as_list_opt::<i32>());
        for (i, time_ns) in c.times().into_iter().enumerate() {
            let (Some(time_ns), Some(code)) =
                (time_ns, value(c.primitive::<UInt32Type>("code"), i))
            else {
                continue;
            };
            let affected_pids = affected
                .filter(|a| a.is_valid(i))
                .and_then(|a| {
                    let values = a.value(i);
                    values
                        .as_primitive_opt::<Int32Type>()
                        .map(|v| v.iter().flatten().collect())
                })
                .unwrap_or_default();
            xids.push(Xid {
                time_ns,
                host: text(c.strings("host"), i).unwrap_or_default(),
                code,
                pci_bus_id: text(c.strings("pci_bus_id"), i).unwrap_or_default(),
                gpu_uuid: text(c.strings("gpu_uuid"), i),
                gpu_model: text(c.strings("gpu_model"), i),
                gpu_index: value(c.primitive::<Int32Type>("gpu_index"), i),
                message: text(c.strings("message"), i).unwrap_or_default(),
                source: text(c.strings("source"), i),
                pid: value(c.primitive::<Int32Type>("pid"), i),
                comm: text(c.strings("comm"), i),
                name: text(c.strings("xid_name"), i),
                severity: text(c.strings("severity"), i),
                action: text(c.strings("action"), i),
                incident_id: text(c.strings("incident_id"), i),
                root_candidate: c.flag("root_candidate", i),
                attribution: text(c.strings("attribution"), i),
                affected_pids,
                pod: text(c.strings("pod_namespace"), i)
                    .zip(text(c.strings("pod_name"), i))
                    .map(|(namespace, name)| format!("{namespace}/{name}")),
                container_id: text(c.strings("container_id"), i),
                suspect_kernel: text(c.strings("suspect_kernel"), i),
                suspects: nested::suspects(batch, i),
                suspects_sampled: c.flag("suspects_sampled", i),
            });
        }
    }
    xids.sort_by_key(|x| x.time_ns);
    xids
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::views::fixtures::{cuda_batch, cuda_row, recorded_batch, xid_batch, xid_record};

    #[test]
    fn rows_come_out_typed_with_their_arguments() {
        let batch = cuda_batch(&[
            cuda_row(2_000, "cuLaunchKernel", 0, 0),
            cuda_row(1_000, "cuCtxSynchronize", 700, 50),
        ]);
        let calls = cuda_calls(&[batch]);
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[0].function, "cuCtxSynchronize", "sorted by time");
        assert!(calls[0].failed());
        assert!(calls[1].entry_only() && !calls[1].failed());
        assert_eq!(calls[1].grid, Some([1, 2, 3]));
        assert_eq!(calls[1].block, Some([4, 5, 6]));
        assert_eq!(calls[1].stream, Some(0x5000));
        assert_eq!(calls[0].host, "node-a");

        let xids = xids(&[xid_batch(&[xid_record(
            5,
            79,
            "0000:3b:00.0",
            "fatal",
            "off the bus",
        )])]);
        assert_eq!(xids[0].affected_pids, [100]);
        assert_eq!(
            xids[0].display_name(),
            "GPU fell off the PCIe bus",
            "from the catalog"
        );
        assert_eq!(xids[0].display_severity(), "fatal");
    }

    #[test]
    fn missing_columns_read_as_null() {
        let batch = cuda_batch(&[cuda_row(1_000, "cuInit", 0, 10)]);
        let keep: Vec<usize> = ["time", "pid", "function"]
            .iter()
            .map(|n| batch.schema().index_of(n).unwrap())
            .collect();
        let narrow = batch.project(&keep).unwrap();
        let calls = cuda_calls(&[narrow]);
        assert_eq!(calls.len(), 1);
        assert_eq!((calls[0].time_ns, calls[0].tid), (1_000, 100));
        assert_eq!(calls[0].stream, None);
        assert!(!calls[0].flight_recorder, "no column: not flight-recorded");
    }

    #[test]
    fn flight_recorded_calls_are_marked_and_ordinary_ones_not() {
        let incident = "node-a/0000:3b:00.0/5000";
        let calls = cuda_calls(&[
            cuda_batch(&[cuda_row(1_000, "cuCtxSynchronize", 700, 50)]),
            recorded_batch(&[cuda_row(900, "cuLaunchKernel", 0, 40)], incident),
        ]);
        let marks: Vec<(&str, bool, Option<&str>)> = calls
            .iter()
            .map(|c| {
                (
                    c.function.as_str(),
                    c.flight_recorder,
                    c.incident_id.as_deref(),
                )
            })
            .collect();
        assert_eq!(
            marks,
            [
                ("cuLaunchKernel", true, Some(incident)),
                ("cuCtxSynchronize", false, None)
            ]
        );
    }
}
