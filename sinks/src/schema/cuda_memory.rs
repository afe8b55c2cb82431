//! The `cuda_memory` table: what each process holds per GPU, by kind, at the end of each
//! statistics interval, from the allocations and frees the agent saw (one row per process and
//! GPU holding something). `seen_from_start` false means the figures are a lower bound: the
//! agent did not see all of the process's allocations.

use std::sync::Arc;

use arrow_array::{ArrayRef, BooleanArray, Int32Array, StringArray, UInt64Array};
use arrow_schema::{DataType, Field, Schema};

use super::common::common_fields;
use super::cuda::{CallGpu, MEMORY_KINDS};
use super::row_batch::{KindRows, RowBatchBuilder};
use super::workload::{workload_fields, Workload};
use crate::EventKind;

/// What one process holds on one GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CudaMemoryRow {
    /// When the figures were taken, nanoseconds since the Unix epoch.
    pub time_ns: i64,
    /// Process (thread group) id.
    pub pid: i32,
    /// Name of its thread that last allocated or freed.
    pub comm: String,
    /// The GPU (None: allocations whose GPU is not known).
    pub gpu: Option<Arc<CallGpu>>,
    /// Bytes held per kind (`MEMORY_KINDS` order).
    pub bytes: [u64; 5],
    /// Outstanding allocations (physical handles included).
    pub allocations: u64,
    /// Every allocation of the process was seen.
    pub seen_from_start: bool,
    /// The container and pod of the process, when it runs in one.
    pub workload: Option<Arc<Workload>>,
}

/// The Arrow schema of the `cuda_memory` table.
pub fn schema() -> Arc<Schema> {
    let mut fields = common_fields();
    fields.extend([
        Field::new("pid", DataType::Int32, false),
        Field::new("comm", DataType::Utf8, false),
        Field::new("gpu_uuid", DataType::Utf8, true),
        Field::new("pci_bus_id", DataType::Utf8, true),
        Field::new("gpu_index", DataType::Int32, true),
    ]);
    fields.extend(
        MEMORY_KINDS
            .iter()
            .map(|kind| Field::new(format!("{kind}_bytes"), DataType::UInt64, false)),
    );
    fields.extend([
        Field::new("allocations", DataType::UInt64, false),
        Field::new("seen_from_start", DataType::Boolean, false),
    ]);
    fields.extend(workload_fields());
    super::with_metadata(EventKind::CudaMemory, fields)
}

/// Accumulates [`CudaMemoryRow`]s into a `cuda_memory` [`RecordBatch`](arrow_array::RecordBatch).
pub type CudaMemoryBatchBuilder = RowBatchBuilder<CudaMemoryRow>;

impl KindRows for CudaMemoryRow {
    const TYPICAL_ROWS: usize = 16;
    const SCHEMA: fn() -> Arc<Schema> = schema;

    fn time_and_workload(&self) -> (i64, Option<&Workload>) {
        (self.time_ns, self.workload.as_deref())
    }

    fn columns(rows: &[Self]) -> Vec<ArrayRef> {
        let gpu_text = |f: &dyn Fn(&CallGpu) -> Option<&str>| -> ArrayRef {
            Arc::new(StringArray::from_iter(
                rows.iter().map(|r| r.gpu.as_deref().and_then(f)),
            ))
        };
        let mut columns: Vec<ArrayRef> = vec![
            Arc::new(Int32Array::from_iter_values(rows.iter().map(|r| r.pid))),
            Arc::new(StringArray::from_iter_values(rows.iter().map(|r| &r.comm))),
            gpu_text(&|g| Some(&g.uuid)),
            gpu_text(&|g| g.pci_bus_id.as_deref()),
            Arc::new(Int32Array::from_iter(
                rows.iter().map(|r| r.gpu.as_ref().and_then(|g| g.index)),
            )),
        ];
        columns.extend((0..MEMORY_KINDS.len()).map(|kind| {
            Arc::new(UInt64Array::from_iter_values(
                rows.iter().map(|r| r.bytes[kind]),
            )) as ArrayRef
        }));
        columns.push(Arc::new(UInt64Array::from_iter_values(
            rows.iter().map(|r| r.allocations),
        )));
        columns.push(Arc::new(BooleanArray::from_iter(
            rows.iter().map(|r| Some(r.seen_from_start)),
        )));
        columns
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::identity;
    use arrow_array::cast::AsArray;
    use arrow_array::types::UInt64Type;
    use arrow_array::Array;

    #[test]
    fn a_row_per_process_and_gpu_with_every_kind() {
        let gpu = Arc::new(CallGpu {
            uuid: "GPU-1".into(),
            pci_bus_id: Some("0000:3b:00.0".into()),
            index: Some(3),
        });
        let mut builder = CudaMemoryBatchBuilder::new(identity());
        for (pid, gpu, bytes) in [
            (7, Some(gpu.clone()), [1, 2, 3, 4, u64::MAX]),
            (8, None, [0, 0, 0, 0, 0]),
        ] {
            builder.append(CudaMemoryRow {
                time_ns: i64::MAX,
                pid,
                comm: "python3\n\u{1b}[31m".into(),
                gpu,
                bytes,
                allocations: u64::MAX,
                seen_from_start: pid == 7,
                workload: None,
            });
        }
        assert_eq!(builder.len(), 2);
        let batch = builder.finish().unwrap();
        assert!(builder.is_empty());
        assert_eq!(batch.num_rows(), 2);
        let physical = batch
            .column_by_name("physical_bytes")
            .unwrap()
            .as_primitive::<UInt64Type>();
        assert_eq!(physical.values().to_vec(), [u64::MAX, 0]);
        let uuid = batch.column_by_name("gpu_uuid").unwrap().as_string::<i32>();
        assert_eq!(uuid.iter().collect::<Vec<_>>(), [Some("GPU-1"), None]);
        assert_eq!(batch.column_by_name("gpu_index").unwrap().null_count(), 1);
        let seen = batch
            .column_by_name("seen_from_start")
            .unwrap()
            .as_boolean();
        assert_eq!(seen.iter().collect::<Vec<_>>(), [Some(true), Some(false)]);
        assert_eq!(
            batch.schema().metadata()[super::super::KIND_KEY],
            "cuda_memory"
        );
    }
}
