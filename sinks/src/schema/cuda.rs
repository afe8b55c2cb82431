//! The `cuda` table: one row per completed CUDA driver API call.

use std::sync::Arc;

use arrow_array::builder::{
    BooleanBuilder, Int32Builder, StringBuilder, UInt32Builder, UInt64Builder,
};
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{ArrowError, DataType, Field, Schema};

use super::common::{common_fields, CommonColumns, HostIdentity};
use super::workload::{workload_fields, Workload, WorkloadColumns};
use crate::EventKind;

/// Grid and block dimensions of a kernel launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LaunchDims {
    /// gridDimX, gridDimY, gridDimZ.
    pub grid: [u32; 3],
    /// blockDimX, blockDimY, blockDimZ.
    pub block: [u32; 3],
    /// Dynamic shared memory per block, in bytes.
    pub shared_mem_bytes: u32,
    /// Only the arguments passed in registers were read (a flight-recorder launch without
    /// `flight_recorder_launch_details`): block z and the shared memory are unknown and
    /// written as nulls.
    pub registers_only: bool,
}

/// One call, borrowed from the decoder so that appending copies each string once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CudaRow<'a> {
    /// Entry time, nanoseconds since the Unix epoch.
    pub time_ns: i64,
    /// Process id (thread group id).
    pub pid: i32,
    /// Thread id.
    pub tid: i32,
    /// Thread name at the time of the call.
    pub comm: &'a str,
    /// Exported symbol that was called, e.g. `cuMemAlloc_v2`.
    pub function: &'a str,
    /// Time from entry to return.
    pub duration_ns: u64,
    /// The CUresult returned.
    pub result: u32,
    /// Name of `result`, e.g. `CUDA_ERROR_ILLEGAL_ADDRESS`.
    pub result_name: &'a str,
    /// Bytes allocated or copied, for functions that take a size.
    pub bytes: Option<u64>,
    /// Device address allocated (on success), freed, or copied to/from.
    pub device_ptr: Option<u64>,
    /// The CUstream handle, for functions that take one.
    pub stream: Option<u64>,
    /// Launch geometry, for kernel launches.
    pub launch: Option<LaunchDims>,
    /// The container and pod of the process, when it runs in one.
    pub workload: Option<&'a Workload>,
}

/// The Arrow schema of the `cuda` table.
pub fn schema() -> Arc<Schema> {
    let mut fields = common_fields();
    fields.extend([
        Field::new("pid", DataType::Int32, false),
        Field::new("tid", DataType::Int32, false),
        Field::new("comm", DataType::Utf8, false),
        Field::new("function", DataType::Utf8, false),
        Field::new("duration_ns", DataType::UInt64, false),
        Field::new("result", DataType::UInt32, false),
        Field::new("result_name", DataType::Utf8, false),
        Field::new("bytes", DataType::UInt64, true),
        Field::new("device_ptr", DataType::UInt64, true),
        Field::new("stream", DataType::UInt64, true),
        Field::new("grid_x", DataType::UInt32, true),
        Field::new("grid_y", DataType::UInt32, true),
        Field::new("grid_z", DataType::UInt32, true),
        Field::new("block_x", DataType::UInt32, true),
        Field::new("block_y", DataType::UInt32, true),
        Field::new("block_z", DataType::UInt32, true),
        Field::new("shared_mem_bytes", DataType::UInt32, true),
        // Schema version 2: the XID incident a failed call belongs to.
        Field::new("incident_id", DataType::Utf8, true),
    ]);
    // Schema version 3: the container and pod of the process.
    fields.extend(workload_fields());
    // Schema version 4: a call the flight recorder kept in memory and wrote when an incident
    // started (the row's `incident_id`); false for calls written as they happened.
    fields.push(Field::new("flight_recorder", DataType::Boolean, true));
    super::with_metadata(EventKind::Cuda, fields)
}

/// Fixed bytes per row in the finished arrays, for the batcher's `max_bytes` bound (the
/// `flight_recorder` flag, two bits, rounds up to one byte).
const FIXED_ROW_BYTES: usize = 8 + 8 + 4 + 4 + 8 + 4 + 8 * 3 + 4 * 7 + 6 * 4 + 1;

/// Accumulates [`CudaRow`]s into a `cuda` [`RecordBatch`].
#[derive(Debug)]
pub struct CudaBatchBuilder {
    schema: Arc<Schema>,
    common: CommonColumns,
    pid: Int32Builder,
    tid: Int32Builder,
    comm: StringBuilder,
    function: StringBuilder,
    duration_ns: UInt64Builder,
    result: UInt32Builder,
    result_name: StringBuilder,
    bytes: UInt64Builder,
    device_ptr: UInt64Builder,
    stream: UInt64Builder,
    dims: [UInt32Builder; 7],
    incident_id: StringBuilder,
    workload: WorkloadColumns,
    /// True for rows of [`CudaBatchBuilder::append_flight_recorded`], false for the others.
    flight_recorder: BooleanBuilder,
    /// Running estimate of the finished batch size.
    estimated_bytes: usize,
}

impl CudaBatchBuilder {
    /// A builder whose rows carry `identity`; `capacity` rows are pre-allocated.
    pub fn new(identity: HostIdentity, capacity: usize) -> Self {
        Self {
            schema: schema(),
            common: CommonColumns::new(identity, capacity),
            pid: Int32Builder::with_capacity(capacity),
            tid: Int32Builder::with_capacity(capacity),
            comm: StringBuilder::with_capacity(capacity, capacity * 16),
            function: StringBuilder::with_capacity(capacity, capacity * 16),
            duration_ns: UInt64Builder::with_capacity(capacity),
            result: UInt32Builder::with_capacity(capacity),
            result_name: StringBuilder::with_capacity(capacity, capacity * 12),
            bytes: UInt64Builder::with_capacity(capacity),
            device_ptr: UInt64Builder::with_capacity(capacity),
            stream: UInt64Builder::with_capacity(capacity),
            dims: std::array::from_fn(|_| UInt32Builder::with_capacity(capacity)),
            incident_id: StringBuilder::with_capacity(capacity, 0),
            workload: WorkloadColumns::new(),
            flight_recorder: BooleanBuilder::with_capacity(capacity),
            estimated_bytes: 0,
        }
    }

    /// Appends one call.
    #[inline]
    pub fn append(&mut self, row: &CudaRow<'_>) {
        self.append_linked(row, None);
    }

    /// Appends one call that belongs to an XID incident (a failed call of an affected process).
    #[inline]
    pub fn append_linked(&mut self, row: &CudaRow<'_>, incident_id: Option<&str>) {
        self.append_row(row, incident_id, false);
    }

    /// Appends one call the flight recorder kept in memory and writes because the incident
    /// `incident_id` started: a copy of a call that was already counted (in `cuda_stats`, or as
    /// a row), marked `flight_recorder = true` so that readers do not count it again.
    #[inline]
    pub fn append_flight_recorded(&mut self, row: &CudaRow<'_>, incident_id: &str) {
        self.append_row(row, Some(incident_id), true);
    }

    #[inline]
    fn append_row(&mut self, row: &CudaRow<'_>, incident_id: Option<&str>, flight_recorder: bool) {
        self.incident_id.append_option(incident_id);
        self.flight_recorder.append_value(flight_recorder);
        self.workload.append(row.workload);
        self.common.append(row.time_ns);
        self.pid.append_value(row.pid);
        self.tid.append_value(row.tid);
        self.comm.append_value(row.comm);
        self.function.append_value(row.function);
        self.duration_ns.append_value(row.duration_ns);
        self.result.append_value(row.result);
        self.result_name.append_value(row.result_name);
        self.bytes.append_option(row.bytes);
        self.device_ptr.append_option(row.device_ptr);
        self.stream.append_option(row.stream);
        match row.launch {
            Some(dims) => {
                let values = [
                    dims.grid[0],
                    dims.grid[1],
                    dims.grid[2],
                    dims.block[0],
                    dims.block[1],
                    dims.block[2],
                    dims.shared_mem_bytes,
                ];
                for (index, (builder, value)) in self.dims.iter_mut().zip(values).enumerate() {
                    // blockDimZ and sharedMemBytes are the 6th and 7th values.
                    if dims.registers_only && index >= 5 {
                        builder.append_null();
                    } else {
                        builder.append_value(value);
                    }
                }
            }
            None => {
                for builder in &mut self.dims {
                    builder.append_null();
                }
            }
        }
        self.estimated_bytes +=
            FIXED_ROW_BYTES + row.comm.len() + row.function.len() + row.result_name.len();
    }

    /// Rows appended since the last [`finish`](Self::finish).
    pub fn len(&self) -> usize {
        self.common.len()
    }

    /// True when no row is waiting.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Approximate size in bytes of the batch [`finish`](Self::finish) would return.
    pub fn estimated_bytes(&self) -> usize {
        self.estimated_bytes
    }

    /// The rows appended so far as one batch; the builder starts empty again.
    pub fn finish(&mut self) -> Result<RecordBatch, ArrowError> {
        let [time, time_ns, host, boot_id] = self.common.finish();
        let mut columns: Vec<ArrayRef> = vec![
            time,
            time_ns,
            host,
            boot_id,
            Arc::new(self.pid.finish()),
            Arc::new(self.tid.finish()),
            Arc::new(self.comm.finish()),
            Arc::new(self.function.finish()),
            Arc::new(self.duration_ns.finish()),
            Arc::new(self.result.finish()),
            Arc::new(self.result_name.finish()),
            Arc::new(self.bytes.finish()),
            Arc::new(self.device_ptr.finish()),
            Arc::new(self.stream.finish()),
        ];
        columns.extend(
            self.dims
                .iter_mut()
                .map(|b| Arc::new(b.finish()) as ArrayRef),
        );
        columns.push(Arc::new(self.incident_id.finish()));
        columns.extend(self.workload.finish());
        columns.push(Arc::new(self.flight_recorder.finish()));
        self.estimated_bytes = 0;
        RecordBatch::try_new(self.schema.clone(), columns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::cast::AsArray;
    use arrow_array::types::{UInt32Type, UInt64Type};
    use arrow_array::Array;

    use crate::test_support::{cuda_row, identity};

    fn row(function: &str) -> CudaRow<'_> {
        CudaRow {
            time_ns: 1_700_000_000_123_456_789,
            pid: 10,
            tid: 11,
            comm: "python3",
            function,
            duration_ns: 1500,
            result: 700,
            result_name: "CUDA_ERROR_ILLEGAL_ADDRESS",
            device_ptr: Some(0x7f00_0000_0000),
            launch: Some(LaunchDims {
                grid: [1, 2, 3],
                block: [4, 5, 6],
                shared_mem_bytes: 7,
                registers_only: false,
            }),
            ..cuda_row()
        }
    }

    #[test]
    fn builds_rows_with_nulls_where_arguments_are_absent() {
        let mut builder = CudaBatchBuilder::new(identity(), 4);
        builder.append(&row("cuLaunchKernel"));
        let mut other = row("cuCtxSynchronize");
        other.launch = None;
        other.device_ptr = None;
        other.bytes = Some(4096);
        builder.append(&other);
        assert_eq!(builder.len(), 2);
        let batch = builder.finish().unwrap();
        assert!(builder.is_empty());
        assert_eq!(batch.num_rows(), 2);
        assert_eq!(batch.schema().metadata()["gpuship.kind"], "cuda");
        let functions = batch.column_by_name("function").unwrap().as_string::<i32>();
        assert_eq!(functions.value(0), "cuLaunchKernel");
        assert_eq!(functions.value(1), "cuCtxSynchronize");
        let bytes = batch
            .column_by_name("bytes")
            .unwrap()
            .as_primitive::<UInt64Type>();
        assert!(bytes.is_null(0));
        assert_eq!(bytes.value(1), 4096);
        let grid_z = batch
            .column_by_name("grid_z")
            .unwrap()
            .as_primitive::<UInt32Type>();
        assert_eq!(grid_z.value(0), 3);
        assert!(grid_z.is_null(1));
        let host = batch.column_by_name("host").unwrap().as_string::<i32>();
        assert_eq!(host.value(1), &*identity().host);
        let time = batch
            .column_by_name("time")
            .unwrap()
            .as_primitive::<arrow_array::types::TimestampMicrosecondType>();
        assert_eq!(time.value(0), 1_700_000_000_123_456);
    }

    /// A launch of which only the register arguments were read has its grid and block x/y;
    /// block z and the shared memory are nulls, never zeros that would read as real values.
    #[test]
    fn register_only_launches_write_nulls_for_the_stack_arguments() {
        let mut builder = CudaBatchBuilder::new(identity(), 2);
        let mut recorded = row("cuLaunchKernel");
        recorded.launch = Some(LaunchDims {
            grid: [u32::MAX, 2, 3],
            block: [1024, 1, 99],
            shared_mem_bytes: 99,
            registers_only: true,
        });
        builder.append(&recorded);
        let batch = builder.finish().unwrap();
        let column = |name: &str| {
            let values = batch
                .column_by_name(name)
                .unwrap()
                .as_primitive::<UInt32Type>();
            (!values.is_null(0)).then(|| values.value(0))
        };
        let dims: Vec<Option<u32>> = [
            "grid_x",
            "grid_y",
            "grid_z",
            "block_x",
            "block_y",
            "block_z",
            "shared_mem_bytes",
        ]
        .into_iter()
        .map(column)
        .collect();
        assert_eq!(
            dims,
            vec![
                Some(u32::MAX),
                Some(2),
                Some(3),
                Some(1024),
                Some(1),
                None,
                None
            ]
        );
    }

    /// Ordinary rows are `false` (linked or not); flight-recorded rows `true` with their
    /// incident; the column is the schema's last, and every other column is the same as for
    /// an ordinary row.
    #[test]
    fn flight_recorded_rows_are_marked_with_their_incident() {
        let mut builder = CudaBatchBuilder::new(identity(), 4);
        builder.append(&row("cuLaunchKernel"));
        builder.append_linked(&row("cuCtxSynchronize"), Some("h/0000:3b:00.0/5"));
        builder.append_flight_recorded(&row("cuLaunchKernel"), "h/0000:3b:00.0/5");
        builder.append_flight_recorded(&row("cuMemcpyAsync"), "h/0000:86:00.0/9");
        let estimated = builder.estimated_bytes();
        assert_eq!(
            estimated,
            4 * (FIXED_ROW_BYTES + 7 + 26) + 14 + 16 + 14 + 13
        );
        let batch = builder.finish().unwrap();
        let schema = batch.schema();
        let last = schema.fields().last().unwrap();
        assert_eq!(
            (last.name().as_str(), last.data_type(), last.is_nullable()),
            ("flight_recorder", &DataType::Boolean, true)
        );
        assert_eq!(batch.num_columns(), schema.fields().len());
        assert_eq!(schema.metadata()[super::super::SCHEMA_VERSION_KEY], "4");
        let marks = batch
            .column_by_name("flight_recorder")
            .unwrap()
            .as_boolean();
        assert_eq!(marks.null_count(), 0);
        assert_eq!(
            marks.iter().collect::<Vec<_>>(),
            [Some(false), Some(false), Some(true), Some(true)]
        );
        let incidents = batch
            .column_by_name("incident_id")
            .unwrap()
            .as_string::<i32>();
        assert_eq!(
            incidents.iter().collect::<Vec<_>>(),
            [
                None,
                Some("h/0000:3b:00.0/5"),
                Some("h/0000:3b:00.0/5"),
                Some("h/0000:86:00.0/9")
            ]
        );
        // The copy is the call: only the two marker columns differ from an ordinary row.
        let mut plain = CudaBatchBuilder::new(identity(), 1);
        plain.append(&row("cuLaunchKernel"));
        let plain = plain.finish().unwrap();
        for (i, field) in schema.fields().iter().enumerate() {
            if ["incident_id", "flight_recorder"].contains(&field.name().as_str()) {
                continue;
            }
            assert_eq!(
                batch.column(i).slice(2, 1).to_data(),
                plain.column(i).to_data(),
                "{}",
                field.name()
            );
        }
    }

    #[test]
    fn finish_twice_gives_an_empty_second_batch() {
        let mut builder = CudaBatchBuilder::new(identity(), 1);
        builder.append(&row("cuInit"));
        assert_eq!(builder.finish().unwrap().num_rows(), 1);
        assert_eq!(builder.finish().unwrap().num_rows(), 0);
        assert_eq!(builder.estimated_bytes(), 0);
    }
}
