//! The columns each kind of row is read from: queries select these instead of `*`, because
//! every column read costs a decoder per file (over a fleet's day, tens of thousands of files).

#[cfg(doc)]
use super::rows::{cuda_calls, xids};

/// The columns [`cuda_calls`] reads: a query for calls selects these, not `*`, since every
/// column read costs a decoder per file.
pub const CUDA_CALL_COLUMNS: &[&str] = &[
    "time",
    "time_ns",
    "host",
    "pid",
    "tid",
    "comm",
    "function",
    "duration_ns",
    "result",
    "result_name",
    "bytes",
    "device_ptr",
    "stream",
    "grid_x",
    "grid_y",
    "grid_z",
    "block_x",
    "block_y",
    "block_z",
    "shared_mem_bytes",
    "incident_id",
    "flight_recorder",
    "kernel_name_demangled",
    "gpu_uuid",
    "pci_bus_id",
    "gpu_index",
    "held_memory",
    "largest_allocations",
];

/// The columns [`xids`] reads.
pub const XID_COLUMNS: &[&str] = &[
    "time",
    "time_ns",
    "host",
    "code",
    "pci_bus_id",
    "gpu_uuid",
    "gpu_model",
    "gpu_index",
    "message",
    "source",
    "pid",
    "comm",
    "xid_name",
    "severity",
    "action",
    "incident_id",
    "root_candidate",
    "attribution",
    "affected_pids",
    "pod_namespace",
    "pod_name",
    "container_id",
    "suspect_kernel",
    "suspects",
];

/// `columns` as a SELECT list.
pub fn select_list(columns: &[&str]) -> String {
    columns.join(", ")
}

#[cfg(test)]
mod tests {
    use arrow_array::RecordBatch;

    use super::*;
    use crate::views::fixtures::{cuda_batch, cuda_row, recorded_batch, xid_batch, xid_record};
    use crate::views::rows::{cuda_calls, xids};

    /// The column lists name columns of the tables, and the rows read through them are the
    /// rows read from every column.
    #[test]
    fn the_column_lists_read_every_field_the_rows_use() {
        fn project(batch: &RecordBatch, columns: &[&str]) -> RecordBatch {
            let keep: Vec<usize> = columns
                .iter()
                .map(|n| batch.schema().index_of(n).expect("a column of the table"))
                .collect();
            batch.project(&keep).unwrap()
        }
        let mut failed = cuda_row(2_000, "cuLaunchKernel", 700, 50);
        failed.bytes = Some(4096);
        failed.device_ptr = Some(0x7f00);
        failed.objects.kernel_name_demangled = Some("wild_write(int*)");
        let calls = cuda_batch(&[failed, cuda_row(1_000, "cuMemAlloc_v2", 2, 7)]);
        let recorded = recorded_batch(&[cuda_row(500, "cuLaunchKernel", 0, 9)], "node-a/x/1");
        let full = cuda_calls(&[calls.clone(), recorded.clone()]);
        assert_eq!(full.len(), 3);
        assert!(full[0].flight_recorder);
        let projected = [calls, recorded].map(|b| project(&b, CUDA_CALL_COLUMNS));
        assert_eq!(cuda_calls(&projected), full);

        let mut record = xid_record(5, 79, "0000:3b:00.0", "fatal", "off the bus");
        record.gpu = Some(std::sync::Arc::new(gpuship_sinks::schema::GpuIdentity {
            uuid: "GPU-1".into(),
            model: "NVIDIA H100".into(),
            index: 0,
            minor: Some(0),
        }));
        record.annotations.name = Some("GPU fell off the bus".into());
        record.annotations.action = Some("drain".into());
        record.annotations.attribution = Some("driver".into());
        record.annotations.workload = Some(std::sync::Arc::new(gpuship_sinks::schema::Workload {
            pod_namespace: Some("ml".into()),
            pod_name: Some("trainer-0".into()),
            ..Default::default()
        }));
        record.annotations.suspects = Some(vec![gpuship_sinks::schema::KernelSuspect {
            time_ns: 4,
            function: "cuLaunchKernel".into(),
            kernel_name_demangled: "wild_write(int*)".into(),
            ..Default::default()
        }]);
        let xid = xid_batch(&[record]);
        let full = xids(std::slice::from_ref(&xid));
        assert_eq!(full[0].suspect_kernel.as_deref(), Some("wild_write(int*)"));
        assert_eq!(full[0].suspects[0].kernel, "wild_write(int*)");
        assert_eq!(full[0].pod.as_deref(), Some("ml/trainer-0"));
        assert_eq!(full[0].gpu_uuid.as_deref(), Some("GPU-1"));
        assert_eq!(xids(&[project(&xid, XID_COLUMNS)]), full);
    }
}
