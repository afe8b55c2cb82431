//! The `driver` table: one row per observed NVIDIA kernel-driver operation: an ioctl on an
//! NVIDIA device file (from the syscall tracepoints), or a call of a driver function (fentry/
//! fexit on the module's BTF), with its duration.

use std::sync::Arc;

use arrow_array::{ArrayRef, Int32Array, Int64Array, StringArray, UInt32Array, UInt64Array};
use arrow_schema::{DataType, Field, Schema};

use super::common::common_fields;
use super::row_batch::{KindRows, RowBatchBuilder};
use super::workload::{workload_fields, Workload};
use crate::EventKind;

/// One driver operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriverRow {
    /// When it started, nanoseconds since the Unix epoch.
    pub time_ns: i64,
    /// Process (thread group) id.
    pub pid: i32,
    /// Thread id.
    pub tid: i32,
    /// Thread name.
    pub comm: String,
    /// `ioctl`, or the driver function's name.
    pub hook: String,
    /// Device file name (`nvidiactl`, `nvidia0`, `nvidia-uvm`), for ioctls.
    pub device: Option<String>,
    /// Device major and minor numbers, for ioctls.
    pub major: Option<u32>,
    /// Minor number.
    pub minor: Option<u32>,
    /// File descriptor, for ioctls.
    pub fd: Option<i32>,
    /// The ioctl request number as passed.
    pub request: Option<u32>,
    /// `none`, `write`, `read`, `read_write` (the `_IOC` direction bits).
    pub request_dir: Option<&'static str>,
    /// `_IOC` type byte (`F` = 70 for NVIDIA's control device).
    pub request_type: Option<u32>,
    /// `_IOC` number.
    pub request_nr: Option<u32>,
    /// `_IOC` argument size.
    pub request_size: Option<u32>,
    /// The NVIDIA escape or UVM command, when known (`NV_ESC_RM_CONTROL`, `UVM_MAP_EXTERNAL_ALLOCATION`).
    pub request_name: Option<&'static str>,
    /// Entry to return.
    pub duration_ns: u64,
    /// The syscall's return value (ioctl); null for function hooks.
    pub result: Option<i64>,
    /// The container and pod of the process, when it runs in one.
    pub workload: Option<Arc<Workload>>,
}

/// The Arrow schema of the `driver` table.
pub fn schema() -> Arc<Schema> {
    let mut fields = common_fields();
    fields.extend([
        Field::new("pid", DataType::Int32, false),
        Field::new("tid", DataType::Int32, false),
        Field::new("comm", DataType::Utf8, false),
        Field::new("hook", DataType::Utf8, false),
        Field::new("device", DataType::Utf8, true),
        Field::new("major", DataType::UInt32, true),
        Field::new("minor", DataType::UInt32, true),
        Field::new("fd", DataType::Int32, true),
        Field::new("request", DataType::UInt32, true),
        Field::new("request_dir", DataType::Utf8, true),
        Field::new("request_type", DataType::UInt32, true),
        Field::new("request_nr", DataType::UInt32, true),
        Field::new("request_size", DataType::UInt32, true),
        Field::new("request_name", DataType::Utf8, true),
        Field::new("duration_ns", DataType::UInt64, false),
        Field::new("result", DataType::Int64, true),
    ]);
    // Schema version 3: the container and pod of the process.
    fields.extend(workload_fields());
    super::with_metadata(EventKind::Driver, fields)
}

/// Accumulates [`DriverRow`]s into a `driver` [`RecordBatch`](arrow_array::RecordBatch).
pub type DriverBatchBuilder = RowBatchBuilder<DriverRow>;

impl KindRows for DriverRow {
    const TYPICAL_ROWS: usize = 64;
    const SCHEMA: fn() -> Arc<Schema> = schema;

    fn time_and_workload(&self) -> (i64, Option<&Workload>) {
        (self.time_ns, self.workload.as_deref())
    }

    fn columns(rows: &[Self]) -> Vec<ArrayRef> {
        let text = |f: &dyn Fn(&DriverRow) -> Option<&str>| -> ArrayRef {
            Arc::new(StringArray::from_iter(rows.iter().map(f)))
        };
        let u32s = |f: &dyn Fn(&DriverRow) -> Option<u32>| -> ArrayRef {
            Arc::new(UInt32Array::from_iter(rows.iter().map(f)))
        };
        vec![
            Arc::new(Int32Array::from_iter_values(rows.iter().map(|r| r.pid))),
            Arc::new(Int32Array::from_iter_values(rows.iter().map(|r| r.tid))),
            text(&|r| Some(r.comm.as_str())),
            text(&|r| Some(r.hook.as_str())),
            text(&|r| r.device.as_deref()),
            u32s(&|r| r.major),
            u32s(&|r| r.minor),
            Arc::new(Int32Array::from_iter(rows.iter().map(|r| r.fd))),
            u32s(&|r| r.request),
            text(&|r| r.request_dir),
            u32s(&|r| r.request_type),
            u32s(&|r| r.request_nr),
            u32s(&|r| r.request_size),
            text(&|r| r.request_name),
            Arc::new(UInt64Array::from_iter_values(
                rows.iter().map(|r| r.duration_ns),
            )),
            Arc::new(Int64Array::from_iter(rows.iter().map(|r| r.result))),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::HostIdentity;
    use arrow_array::cast::AsArray;

    #[test]
    fn rows_land_in_their_columns() {
        let mut builder = DriverBatchBuilder::new(HostIdentity {
            host: "h".into(),
            boot_id: "b".into(),
        });
        builder.append(DriverRow {
            time_ns: 5,
            pid: 7,
            tid: 8,
            comm: "python3".into(),
            hook: "ioctl".into(),
            device: Some("nvidiactl".into()),
            major: Some(195),
            minor: Some(255),
            fd: Some(3),
            request: Some(0xc020462a),
            request_dir: Some("read_write"),
            request_type: Some(0x46),
            request_nr: Some(0x2a),
            request_size: Some(32),
            request_name: Some("NV_ESC_RM_CONTROL"),
            duration_ns: 1200,
            result: Some(0),
            workload: Some(Arc::new(Workload {
                pod_name: Some("trainer-0".into()),
                ..Workload::default()
            })),
        });
        let batch = builder.finish().unwrap();
        let text = |name: &str| batch.column_by_name(name).unwrap().as_string::<i32>();
        assert_eq!(text("pod_name").value(0), "trainer-0");
        assert!(arrow_array::Array::is_null(text("pod_uid"), 0));
        assert_eq!(batch.num_rows(), 1);
        assert_eq!(batch.num_columns(), schema().fields().len());
        assert_eq!(
            batch
                .column_by_name("request_name")
                .unwrap()
                .as_string::<i32>()
                .value(0),
            "NV_ESC_RM_CONTROL"
        );
    }
}
