//! The `cuda` table: one row per completed CUDA driver API call.

use std::sync::Arc;

use arrow_array::builder::{
    BooleanBuilder, Int32Builder, StringBuilder, UInt32Builder, UInt64Builder,
};
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{ArrowError, DataType, Field, Schema};

use super::common::{common_fields, CommonColumns, HostIdentity};
use super::nullable::Nullable;
use super::workload::{workload_fields, Workload, WorkloadColumns};
use crate::EventKind;
use memory::MemoryColumns;
pub use memory::{HeldMemory, LargeAllocation, MEMORY_KINDS};

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

/// The CUDA objects a call made or used, and the kernel a launch ran (schema version 5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CallObjects<'a> {
    /// The object the call makes or uses: a launch's CUfunction or CUkernel, the CUkernel,
    /// CUfunction, CUlibrary or CUmodule a getter or a load made, the one an unload dropped.
    pub handle: Option<u64>,
    /// The object `handle` was made from: the library, module or kernel of a getter.
    pub parent_handle: Option<u64>,
    /// The kernel's mangled name (launches and the calls that name kernels); `unknown` for a
    /// launch of a handle made before the agent started.
    pub kernel_name: Option<&'a str>,
    /// The kernel's demangled name (the mangled one when it is not a mangled C++ name).
    pub kernel_name_demangled: Option<&'a str>,
    /// The GPU the call ran on (schema version 6): its thread's current context's device.
    pub gpu: Option<&'a CallGpu>,
    /// On an allocation that failed for lack of memory (schema version 6): what the process
    /// held on that GPU.
    pub memory: Option<&'a HeldMemory>,
}

/// The GPU of a call (schema version 6).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CallGpu {
    /// `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`, as `cuDeviceGetUuid` returned it.
    pub uuid: String,
    /// `dddd:bb:dd.f`, when the driver's proc files list a GPU with that UUID.
    pub pci_bus_id: Option<String>,
    /// nvidia-smi's index of that GPU (not the process's CUDA ordinal).
    pub index: Option<i32>,
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
    /// Handles and kernel names.
    pub objects: CallObjects<'a>,
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
    // Schema version 5: the handles a call made or used, and the kernel a launch ran.
    fields.extend([
        Field::new("handle", DataType::UInt64, true),
        Field::new("parent_handle", DataType::UInt64, true),
        Field::new("kernel_name", DataType::Utf8, true),
        Field::new("kernel_name_demangled", DataType::Utf8, true),
    ]);
    // Schema version 6: the GPU of the call.
    fields.extend([
        Field::new("gpu_uuid", DataType::Utf8, true),
        Field::new("pci_bus_id", DataType::Utf8, true),
        Field::new("gpu_index", DataType::Int32, true),
    ]);
    fields.extend(memory::fields());
    super::with_metadata(EventKind::Cuda, fields)
}

/// Fixed bytes per row in the finished arrays, for the batcher's `max_bytes` bound (the
/// `flight_recorder` flag, two bits, rounds up to one byte).
const FIXED_ROW_BYTES: usize =
    8 + 8 + 4 + 4 + 8 + 4 + 8 * 3 + 4 * 7 + 6 * 4 + 1 + 8 * 2 + 4 * 2 + 4 * 2 + 4;

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
    bytes: Nullable<UInt64Builder>,
    device_ptr: Nullable<UInt64Builder>,
    stream: Nullable<UInt64Builder>,
    dims: [Nullable<UInt32Builder>; 7],
    incident_id: Nullable<StringBuilder>,
    workload: WorkloadColumns,
    /// True for rows of [`CudaBatchBuilder::append_flight_recorded`], false for the others.
    flight_recorder: BooleanBuilder,
    handle: Nullable<UInt64Builder>,
    parent_handle: Nullable<UInt64Builder>,
    kernel_name: Nullable<StringBuilder>,
    kernel_name_demangled: Nullable<StringBuilder>,
    gpu_uuid: Nullable<StringBuilder>,
    pci_bus_id: Nullable<StringBuilder>,
    gpu_index: Nullable<Int32Builder>,
    memory: MemoryColumns,
    /// Running estimate of the finished batch size.
    estimated_bytes: usize,
    /// Rows each column is allocated for, again after every [`CudaBatchBuilder::finish`].
    capacity: usize,
}

impl CudaBatchBuilder {
    /// A builder whose rows carry `identity`; `capacity` rows are pre-allocated.
    pub fn new(identity: HostIdentity, capacity: usize) -> Self {
        Self::with_schema(schema(), identity, capacity)
    }

    fn with_schema(schema: Arc<Schema>, identity: HostIdentity, capacity: usize) -> Self {
        Self {
            capacity,
            schema,
            common: CommonColumns::new(identity, capacity),
            pid: Int32Builder::with_capacity(capacity),
            tid: Int32Builder::with_capacity(capacity),
            comm: StringBuilder::with_capacity(capacity, capacity * 16),
            function: StringBuilder::with_capacity(capacity, capacity * 16),
            duration_ns: UInt64Builder::with_capacity(capacity),
            result: UInt32Builder::with_capacity(capacity),
            result_name: StringBuilder::with_capacity(capacity, capacity * 12),
            bytes: Nullable::new(UInt64Builder::with_capacity(capacity)),
            device_ptr: Nullable::new(UInt64Builder::with_capacity(capacity)),
            stream: Nullable::new(UInt64Builder::with_capacity(capacity)),
            dims: std::array::from_fn(|_| Nullable::new(UInt32Builder::with_capacity(capacity))),
            incident_id: Nullable::new(StringBuilder::with_capacity(capacity, 0)),
            workload: WorkloadColumns::new(),
            flight_recorder: BooleanBuilder::with_capacity(capacity),
            handle: Nullable::new(UInt64Builder::with_capacity(capacity)),
            parent_handle: Nullable::new(UInt64Builder::with_capacity(capacity)),
            kernel_name: Nullable::new(StringBuilder::with_capacity(capacity, 0)),
            kernel_name_demangled: Nullable::new(StringBuilder::with_capacity(capacity, 0)),
            gpu_uuid: Nullable::new(StringBuilder::with_capacity(capacity, 0)),
            pci_bus_id: Nullable::new(StringBuilder::with_capacity(capacity, 0)),
            gpu_index: Nullable::new(Int32Builder::with_capacity(capacity)),
            memory: MemoryColumns::default(),
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
        if let Some(held) = row.objects.memory {
            self.memory.push(self.len(), held);
            self.estimated_bytes += MemoryColumns::estimated_bytes(held);
        }
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
        let objects = &row.objects;
        self.handle.append_option(objects.handle);
        self.parent_handle.append_option(objects.parent_handle);
        self.kernel_name.append_option(objects.kernel_name);
        self.kernel_name_demangled
            .append_option(objects.kernel_name_demangled);
        let gpu = objects.gpu;
        self.gpu_uuid.append_option(gpu.map(|g| g.uuid.as_str()));
        self.pci_bus_id
            .append_option(gpu.and_then(|g| g.pci_bus_id.as_deref()));
        self.gpu_index.append_option(gpu.and_then(|g| g.index));
        let names = objects.kernel_name.map_or(0, str::len)
            + objects.kernel_name_demangled.map_or(0, str::len)
            + gpu.map_or(0, |g| {
                g.uuid.len() + g.pci_bus_id.as_ref().map_or(0, String::len)
            });
        self.estimated_bytes +=
            FIXED_ROW_BYTES + row.comm.len() + row.function.len() + row.result_name.len() + names;
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
        // Arrow's builders hand their buffers out and start again with none, so the next batch
        // would grow every column from empty (a reallocation and a copy per doubling, an
        // eighth of the consumer's time at 0.7 M rows/s): a fresh builder allocates each
        // column once, at the capacity.
        let fresh = Self::with_schema(
            Arc::clone(&self.schema),
            self.common.identity().clone(),
            self.capacity,
        );
        std::mem::replace(self, fresh).into_batch()
    }

    fn into_batch(mut self) -> Result<RecordBatch, ArrowError> {
        let rows = self.len();
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
            self.bytes.finish(),
            self.device_ptr.finish(),
            self.stream.finish(),
        ];
        columns.extend(self.dims.iter_mut().map(Nullable::finish));
        columns.push(self.incident_id.finish());
        columns.extend(self.workload.finish());
        columns.push(Arc::new(self.flight_recorder.finish()));
        columns.extend([
            self.handle.finish(),
            self.parent_handle.finish(),
            self.kernel_name.finish(),
            self.kernel_name_demangled.finish(),
            self.gpu_uuid.finish(),
            self.pci_bus_id.finish(),
            self.gpu_index.finish(),
        ]);
        columns.extend(self.memory.finish(rows));
        RecordBatch::try_new(self.schema, columns)
    }
}

mod memory;
#[cfg(test)]
mod tests;
