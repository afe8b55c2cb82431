//! The `xid` table: one row per NVIDIA XID error report.

use std::sync::Arc;

use arrow_array::builder::{Int32Builder, ListBuilder};
use arrow_array::{
    ArrayRef, BooleanArray, Int32Array, RecordBatch, StringArray, UInt32Array, UInt64Array,
};
use arrow_schema::{ArrowError, DataType, Field, Schema};

use super::common::{common_fields, CommonColumns, HostIdentity};
use super::workload::Workload;
use crate::EventKind;

mod suspects;
pub use suspects::KernelSuspect;

/// Where an XID row was observed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum XidSource {
    /// The driver's `nvidia:nvidia_dev_xid` tracepoint.
    Tracepoint,
    /// An `NVRM: Xid` line in the kernel log (/dev/kmsg).
    Kmsg,
    /// Both, reconciled into one row.
    Both,
}

impl XidSource {
    /// The value of the `source` column.
    pub fn as_str(self) -> &'static str {
        match self {
            XidSource::Tracepoint => "tracepoint",
            XidSource::Kmsg => "kmsg",
            XidSource::Both => "both",
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
    /// The device file's minor number (`/dev/nvidia<minor>`), when the driver says.
    pub minor: Option<u32>,
}

/// Fields decoded from the driver's message text, for the XIDs whose text carries them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct XidDetails {
    /// XID 31: the engine that faulted (`GRAPHICS GPC1 GPCCLIENT_T1_8`).
    pub fault_engine: Option<String>,
    /// XID 31: the faulting virtual address.
    pub fault_address: Option<u64>,
    /// XID 31: the fault type (`FAULT_PDE`).
    pub fault_type: Option<String>,
    /// XID 31: the access type (`ACCESS_TYPE_VIRT_WRITE`).
    pub fault_access: Option<String>,
    /// The GPU channel named in the message.
    pub channel: Option<u32>,
    /// ECC XIDs (48, 63, 64, 92, 94, 95, 140): where the error was (`framebuffer partition 6
    /// subpartition 0`, a row or page address).
    pub ecc_location: Option<String>,
    /// XID 154: the recovery action the driver now asks for (`Reset Required`, `Node Reboot
    /// Required`, `Drain P2P`, `Drain and Reset`).
    pub recovery_action: Option<String>,
    /// XIDs 119/120: the GSP function or RPC that failed.
    pub gsp_function: Option<String>,
    /// MIG GPU instance, when the message names one.
    pub mig_gpu_instance: Option<u32>,
    /// MIG compute instance, when the message names one.
    pub mig_compute_instance: Option<u32>,
    /// An earlier XID the driver says caused this one (`caused by previous Xid`).
    pub caused_by_xid: Option<u32>,
}

/// What the agent adds to a report: the catalog entry, decoded fields, the incident and the
/// processes it affected.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct XidAnnotations {
    /// Catalog short name.
    pub name: Option<String>,
    /// Catalog category (`hardware`, `memory`, `nvlink`, `driver`, `application`,
    /// `informational`, `unknown`).
    pub category: Option<String>,
    /// `info`, `warning`, `error`, `fatal`.
    pub severity: Option<String>,
    /// Recommended immediate action (`none`, `restart_application`, `reset_gpu`, ...).
    pub action: Option<String>,
    /// Version of the catalog that said so.
    pub catalog_version: Option<String>,
    /// Decoded message fields.
    pub details: XidDetails,
    /// The incident (cascade of XIDs on one GPU) this XID belongs to.
    pub incident_id: Option<String>,
    /// True for the first XID of its incident: the root-cause candidate.
    pub root_candidate: Option<bool>,
    /// How `pid` was found: `driver_log`, `cuda_activity` or `none`.
    pub attribution: Option<String>,
    /// Processes the XID affected (the attributed one first).
    pub affected_pids: Vec<i32>,
    /// Container and Kubernetes pod of the attributed process.
    pub workload: Option<Arc<Workload>>,
    /// NVIDIA driver version.
    pub driver_version: Option<String>,
    /// The kernels the attributed process launched last before the XID, most recent first:
    /// None when they were not looked for (the code does not point at a running kernel, or no
    /// process was attributed), empty when none were found.
    pub suspects: Option<Vec<KernelSuspect>>,
    /// Whether the overhead budget probed the attributed process's launches only part of the
    /// time in the flight recorder's window before the XID (the faulting launch may be missing
    /// from the suspects); None when suspects were not looked for.
    pub suspects_sampled: Option<bool>,
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
    /// The tracepoint's text, `Xid (PCI:<dev>): <code>, <msg>`, when it saw the XID.
    pub raw_tracepoint: Option<String>,
    /// The kernel-log line, `NVRM: Xid (...): ...`, when the log had it.
    pub raw_kmsg: Option<String>,
    /// What the agent added.
    pub annotations: XidAnnotations,
}

impl XidRecord {
    /// An empty report from `source`, for filling with struct-update syntax.
    pub fn new(source: XidSource) -> Self {
        Self {
            time_ns: 0,
            code: 0,
            pci_bus_id: String::new(),
            gpu: None,
            message: String::new(),
            source,
            pid: None,
            comm: None,
            reporter_pid: None,
            reporter_comm: None,
            kmsg_seq: None,
            message_truncated: false,
            raw_tracepoint: None,
            raw_kmsg: None,
            annotations: XidAnnotations::default(),
        }
    }
}

/// The Arrow schema of the `xid` table.
pub fn schema() -> Arc<Schema> {
    let mut fields = common_fields();
    let text = |name: &str| Field::new(name, DataType::Utf8, true);
    fields.extend([
        Field::new("code", DataType::UInt32, false),
        Field::new("pci_bus_id", DataType::Utf8, false),
        text("gpu_uuid"),
        text("gpu_model"),
        Field::new("gpu_index", DataType::Int32, true),
        Field::new("message", DataType::Utf8, false),
        Field::new("source", DataType::Utf8, false),
        Field::new("pid", DataType::Int32, true),
        text("comm"),
        Field::new("reporter_pid", DataType::Int32, true),
        text("reporter_comm"),
        Field::new("kmsg_seq", DataType::UInt64, true),
        Field::new("message_truncated", DataType::Boolean, false),
        // Schema version 2: everything below is nullable and new.
        text("xid_name"),
        text("category"),
        text("severity"),
        text("action"),
        text("catalog_version"),
        text("raw_tracepoint"),
        text("raw_kmsg"),
        text("incident_id"),
        Field::new("root_candidate", DataType::Boolean, true),
        text("attribution"),
        Field::new(
            "affected_pids",
            DataType::List(Arc::new(Field::new("item", DataType::Int32, true))),
            true,
        ),
        text("container_id"),
        text("pod_uid"),
        text("driver_version"),
        text("fault_engine"),
        Field::new("fault_address", DataType::UInt64, true),
        text("fault_type"),
        text("fault_access"),
        Field::new("channel", DataType::UInt32, true),
        text("ecc_location"),
        text("recovery_action"),
        text("gsp_function"),
        Field::new("mig_gpu_instance", DataType::UInt32, true),
        Field::new("mig_compute_instance", DataType::UInt32, true),
        Field::new("caused_by_xid", DataType::UInt32, true),
        // Schema version 3: the attributed process's pod by name (`container_id` and `pod_uid`
        // are above, where they have been since version 1).
        text("pod_name"),
        text("pod_namespace"),
    ]);
    // Schema version 5: the kernels launched before the XID.
    fields.extend(suspects::fields());
    super::with_metadata(EventKind::Xid, fields)
}

/// Accumulates [`XidRecord`]s into an `xid` [`RecordBatch`]. XIDs are rare: rows are kept and
/// turned into columns at [`finish`](Self::finish).
#[derive(Debug)]
pub struct XidBatchBuilder {
    schema: Arc<Schema>,
    common: CommonColumns,
    rows: Vec<XidRecord>,
}

fn strings<'a>(
    rows: &'a [XidRecord],
    value: impl Fn(&'a XidRecord) -> Option<&'a str>,
) -> ArrayRef {
    Arc::new(StringArray::from_iter(rows.iter().map(value)))
}

fn workload(record: &XidRecord) -> Option<&Workload> {
    record.annotations.workload.as_deref()
}

fn u32s(rows: &[XidRecord], value: impl Fn(&XidRecord) -> Option<u32>) -> ArrayRef {
    Arc::new(UInt32Array::from_iter(rows.iter().map(value)))
}

fn i32s(rows: &[XidRecord], value: impl Fn(&XidRecord) -> Option<i32>) -> ArrayRef {
    Arc::new(Int32Array::from_iter(rows.iter().map(value)))
}

impl XidBatchBuilder {
    /// A builder whose rows carry `identity`.
    pub fn new(identity: HostIdentity) -> Self {
        Self {
            schema: schema(),
            common: CommonColumns::new(identity, 8),
            rows: Vec::new(),
        }
    }

    /// Appends one XID.
    pub fn append(&mut self, xid: &XidRecord) {
        self.common.append(xid.time_ns);
        self.rows.push(xid.clone());
    }

    /// Rows appended since the last [`finish`](Self::finish).
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// True when no row is waiting.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The rows appended so far as one batch; the builder starts empty again.
    pub fn finish(&mut self) -> Result<RecordBatch, ArrowError> {
        let [time, time_ns, host, boot_id] = self.common.finish();
        let rows = std::mem::take(&mut self.rows);
        let rows = rows.as_slice();
        let gpu = |r: &XidRecord| r.gpu.clone();
        let mut affected = ListBuilder::new(Int32Builder::new());
        for row in rows {
            if row.annotations.affected_pids.is_empty() {
                affected.append_null();
            } else {
                affected
                    .values()
                    .append_slice(&row.annotations.affected_pids);
                affected.append(true);
            }
        }
        let mut columns: Vec<ArrayRef> = vec![
            time,
            time_ns,
            host,
            boot_id,
            u32s(rows, |r| Some(r.code)),
            strings(rows, |r| Some(r.pci_bus_id.as_str())),
            Arc::new(StringArray::from_iter(
                rows.iter().map(|r| gpu(r).map(|g| g.uuid.clone())),
            )),
            Arc::new(StringArray::from_iter(
                rows.iter().map(|r| gpu(r).map(|g| g.model.clone())),
            )),
            i32s(rows, |r| r.gpu.as_ref().map(|g| g.index)),
            strings(rows, |r| Some(r.message.as_str())),
            strings(rows, |r| Some(r.source.as_str())),
            i32s(rows, |r| r.pid),
            strings(rows, |r| r.comm.as_deref()),
            i32s(rows, |r| r.reporter_pid),
            strings(rows, |r| r.reporter_comm.as_deref()),
            Arc::new(UInt64Array::from_iter(rows.iter().map(|r| r.kmsg_seq))),
            Arc::new(BooleanArray::from_iter(
                rows.iter().map(|r| Some(r.message_truncated)),
            )),
            strings(rows, |r| r.annotations.name.as_deref()),
            strings(rows, |r| r.annotations.category.as_deref()),
            strings(rows, |r| r.annotations.severity.as_deref()),
            strings(rows, |r| r.annotations.action.as_deref()),
            strings(rows, |r| r.annotations.catalog_version.as_deref()),
            strings(rows, |r| r.raw_tracepoint.as_deref()),
            strings(rows, |r| r.raw_kmsg.as_deref()),
            strings(rows, |r| r.annotations.incident_id.as_deref()),
            Arc::new(BooleanArray::from_iter(
                rows.iter().map(|r| r.annotations.root_candidate),
            )),
            strings(rows, |r| r.annotations.attribution.as_deref()),
            Arc::new(affected.finish()),
            strings(rows, |r| {
                workload(r).and_then(|w| w.container_id.as_deref())
            }),
            strings(rows, |r| workload(r).and_then(|w| w.pod_uid.as_deref())),
            strings(rows, |r| r.annotations.driver_version.as_deref()),
            strings(rows, |r| r.annotations.details.fault_engine.as_deref()),
            Arc::new(UInt64Array::from_iter(
                rows.iter().map(|r| r.annotations.details.fault_address),
            )),
            strings(rows, |r| r.annotations.details.fault_type.as_deref()),
            strings(rows, |r| r.annotations.details.fault_access.as_deref()),
            u32s(rows, |r| r.annotations.details.channel),
            strings(rows, |r| r.annotations.details.ecc_location.as_deref()),
            strings(rows, |r| r.annotations.details.recovery_action.as_deref()),
            strings(rows, |r| r.annotations.details.gsp_function.as_deref()),
            u32s(rows, |r| r.annotations.details.mig_gpu_instance),
            u32s(rows, |r| r.annotations.details.mig_compute_instance),
            u32s(rows, |r| r.annotations.details.caused_by_xid),
            strings(rows, |r| workload(r).and_then(|w| w.pod_name.as_deref())),
            strings(rows, |r| {
                workload(r).and_then(|w| w.pod_namespace.as_deref())
            }),
        ];
        columns.extend(suspects::columns(rows));
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
mod tests;
