//! The `xid` table: one row per NVIDIA XID error report.

use std::sync::Arc;

use arrow_array::builder::{
    BooleanBuilder, Int32Builder, StringBuilder, UInt32Builder, UInt64Builder,
};
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{ArrowError, DataType, Field, Schema};

use super::common::{common_fields, CommonColumns, HostIdentity};
use crate::EventKind;

/// Where an XID row was observed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum XidSource {
    /// The driver's `nvidia:nvidia_dev_xid` tracepoint.
    Tracepoint,
    /// An `NVRM: Xid` line in the kernel log (/dev/kmsg).
    Kmsg,
}

impl XidSource {
    /// The value of the `source` column.
    pub fn as_str(self) -> &'static str {
        match self {
            XidSource::Tracepoint => "tracepoint",
            XidSource::Kmsg => "kmsg",
        }
    }
}

/// What the agent knows about the GPU a bus id names (from /proc/driver/nvidia/gpus).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuIdentity {
    /// `GPU-xxxxxxxx-...`.
    pub uuid: String,
    /// Marketing name, e.g. `NVIDIA H100 80GB HBM3`.
    pub model: String,
    /// Position in PCI bus order, which is nvidia-smi's default numbering.
    pub index: i32,
}

/// One XID report. XIDs are rare, so rows are owned values rather than borrowed ones.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XidRecord {
    /// When the driver reported it, nanoseconds since the Unix epoch.
    pub time_ns: i64,
    /// The XID number.
    pub code: u32,
    /// Domain-aware PCI address, `dddd:bb:dd.f`.
    pub pci_bus_id: String,
    /// The GPU at that address, when the driver's proc files name it.
    pub gpu: Option<Arc<GpuIdentity>>,
    /// The driver's text after the code, without `pid=`/`name=` fields.
    pub message: String,
    /// Which source saw it.
    pub source: XidSource,
    /// The process the driver attributed the error to, when it said.
    pub pid: Option<i32>,
    /// Name of that process.
    pub comm: Option<String>,
    /// The task that was running when the report fired (often a driver IRQ thread).
    pub reporter_pid: Option<i32>,
    /// Name of the reporting task.
    pub reporter_comm: Option<String>,
    /// Kernel log sequence number, for kmsg rows.
    pub kmsg_seq: Option<u64>,
    /// True when the message was cut to fit the capture buffer.
    pub message_truncated: bool,
}

/// The Arrow schema of the `xid` table.
pub fn schema() -> Arc<Schema> {
    let mut fields = common_fields();
    fields.extend([
        Field::new("code", DataType::UInt32, false),
        Field::new("pci_bus_id", DataType::Utf8, false),
        Field::new("gpu_uuid", DataType::Utf8, true),
        Field::new("gpu_model", DataType::Utf8, true),
        Field::new("gpu_index", DataType::Int32, true),
        Field::new("message", DataType::Utf8, false),
        Field::new("source", DataType::Utf8, false),
        Field::new("pid", DataType::Int32, true),
        Field::new("comm", DataType::Utf8, true),
        Field::new("reporter_pid", DataType::Int32, true),
        Field::new("reporter_comm", DataType::Utf8, true),
        Field::new("kmsg_seq", DataType::UInt64, true),
        Field::new("message_truncated", DataType::Boolean, false),
    ]);
    super::with_metadata(EventKind::Xid, fields)
}

/// Accumulates [`XidRecord`]s into an `xid` [`RecordBatch`].
#[derive(Debug)]
pub struct XidBatchBuilder {
    schema: Arc<Schema>,
    common: CommonColumns,
    code: UInt32Builder,
    pci_bus_id: StringBuilder,
    gpu_uuid: StringBuilder,
    gpu_model: StringBuilder,
    gpu_index: Int32Builder,
    message: StringBuilder,
    source: StringBuilder,
    pid: Int32Builder,
    comm: StringBuilder,
    reporter_pid: Int32Builder,
    reporter_comm: StringBuilder,
    kmsg_seq: UInt64Builder,
    message_truncated: BooleanBuilder,
}

impl XidBatchBuilder {
    /// A builder whose rows carry `identity`.
    pub fn new(identity: HostIdentity) -> Self {
        Self {
            schema: schema(),
            common: CommonColumns::new(identity, 8),
            code: UInt32Builder::new(),
            pci_bus_id: StringBuilder::new(),
            gpu_uuid: StringBuilder::new(),
            gpu_model: StringBuilder::new(),
            gpu_index: Int32Builder::new(),
            message: StringBuilder::new(),
            source: StringBuilder::new(),
            pid: Int32Builder::new(),
            comm: StringBuilder::new(),
            reporter_pid: Int32Builder::new(),
            reporter_comm: StringBuilder::new(),
            kmsg_seq: UInt64Builder::new(),
            message_truncated: BooleanBuilder::new(),
        }
    }

    /// Appends one XID.
    pub fn append(&mut self, xid: &XidRecord) {
        self.common.append(xid.time_ns);
        self.code.append_value(xid.code);
        self.pci_bus_id.append_value(&xid.pci_bus_id);
        self.gpu_uuid
            .append_option(xid.gpu.as_ref().map(|g| g.uuid.as_str()));
        self.gpu_model
            .append_option(xid.gpu.as_ref().map(|g| g.model.as_str()));
        self.gpu_index
            .append_option(xid.gpu.as_ref().map(|g| g.index));
        self.message.append_value(&xid.message);
        self.source.append_value(xid.source.as_str());
        self.pid.append_option(xid.pid);
        self.comm.append_option(xid.comm.as_deref());
        self.reporter_pid.append_option(xid.reporter_pid);
        self.reporter_comm
            .append_option(xid.reporter_comm.as_deref());
        self.kmsg_seq.append_option(xid.kmsg_seq);
        self.message_truncated.append_value(xid.message_truncated);
    }

    /// Rows appended since the last [`finish`](Self::finish).
    pub fn len(&self) -> usize {
        self.common.len()
    }

    /// True when no row is waiting.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The rows appended so far as one batch; the builder starts empty again.
    pub fn finish(&mut self) -> Result<RecordBatch, ArrowError> {
        let [time, time_ns, host, boot_id] = self.common.finish();
        let columns: Vec<ArrayRef> = vec![
            time,
            time_ns,
            host,
            boot_id,
            Arc::new(self.code.finish()),
            Arc::new(self.pci_bus_id.finish()),
            Arc::new(self.gpu_uuid.finish()),
            Arc::new(self.gpu_model.finish()),
            Arc::new(self.gpu_index.finish()),
            Arc::new(self.message.finish()),
            Arc::new(self.source.finish()),
            Arc::new(self.pid.finish()),
            Arc::new(self.comm.finish()),
            Arc::new(self.reporter_pid.finish()),
            Arc::new(self.reporter_comm.finish()),
            Arc::new(self.kmsg_seq.finish()),
            Arc::new(self.message_truncated.finish()),
        ];
        RecordBatch::try_new(self.schema.clone(), columns)
    }
}

/// One batch holding exactly `records`; convenient for the rare XID path.
pub fn batch_of(identity: &HostIdentity, records: &[XidRecord]) -> Result<RecordBatch, ArrowError> {
    let mut builder = XidBatchBuilder::new(identity.clone());
    for record in records {
        builder.append(record);
    }
    builder.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::cast::AsArray;
    use arrow_array::types::{Int32Type, UInt32Type};
    use arrow_array::Array;

    #[test]
    fn row_values_land_in_their_columns() {
        let identity = HostIdentity {
            host: "gpu-node".into(),
            boot_id: "boot".into(),
        };
        let gpu = Arc::new(GpuIdentity {
            uuid: "GPU-1234".into(),
            model: "NVIDIA H100".into(),
            index: 0,
        });
        let records = [
            XidRecord {
                time_ns: 1_000,
                code: 79,
                pci_bus_id: "0000:3b:00.0".into(),
                gpu: Some(gpu),
                message: "GPU has fallen off the bus.".into(),
                source: XidSource::Kmsg,
                pid: None,
                comm: None,
                reporter_pid: None,
                reporter_comm: None,
                kmsg_seq: Some(42),
                message_truncated: false,
            },
            XidRecord {
                time_ns: 2_000,
                code: 31,
                pci_bus_id: "0000:00:06.0".into(),
                gpu: None,
                message: "MMU Fault".into(),
                source: XidSource::Tracepoint,
                pid: Some(468),
                comm: Some("python3".into()),
                reporter_pid: Some(12),
                reporter_comm: Some("irq/nvidia".into()),
                kmsg_seq: None,
                message_truncated: true,
            },
        ];
        let batch = batch_of(&identity, &records).unwrap();
        assert_eq!(batch.num_rows(), 2);
        let code = batch
            .column_by_name("code")
            .unwrap()
            .as_primitive::<UInt32Type>();
        assert_eq!((code.value(0), code.value(1)), (79, 31));
        let uuid = batch.column_by_name("gpu_uuid").unwrap().as_string::<i32>();
        assert_eq!(uuid.value(0), "GPU-1234");
        assert!(uuid.is_null(1));
        let source = batch.column_by_name("source").unwrap().as_string::<i32>();
        assert_eq!((source.value(0), source.value(1)), ("kmsg", "tracepoint"));
        let pid = batch
            .column_by_name("pid")
            .unwrap()
            .as_primitive::<Int32Type>();
        assert!(pid.is_null(0));
        assert_eq!(pid.value(1), 468);
        assert!(batch
            .column_by_name("message_truncated")
            .unwrap()
            .as_boolean()
            .value(1));
    }
}
