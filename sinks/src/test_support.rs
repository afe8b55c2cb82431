//! Batches for the crate's unit tests.

use arrow_array::cast::AsArray;
use arrow_array::types::UInt32Type;

use crate::schema::{xid_batch_of, CudaBatchBuilder, CudaRow, HostIdentity, XidRecord, XidSource};
use crate::{EventBatch, EventKind};

pub(crate) fn identity() -> HostIdentity {
    HostIdentity {
        host: "h".into(),
        boot_id: "b".into(),
    }
}

/// `rows` CUDA calls whose result code is `tag` (to tell batches apart) and whose time and
/// byte count are the row index (to check round trips).
pub(crate) fn cuda_batch(rows: usize, tag: u32) -> EventBatch {
    let mut builder = CudaBatchBuilder::new(identity(), rows);
    for i in 0..rows {
        builder.append(&CudaRow {
            time_ns: i as i64,
            pid: 1,
            tid: 1,
            comm: "c",
            function: "cuLaunchKernel",
            duration_ns: 5,
            result: tag,
            result_name: "x",
            bytes: Some(i as u64),
            device_ptr: None,
            stream: None,
            launch: None,
            workload: None,
        });
    }
    EventBatch::new(EventKind::Cuda, builder.finish().unwrap())
}

/// The tag of a batch made by [`cuda_batch`].
pub(crate) fn result_tag(batch: &EventBatch) -> u32 {
    batch
        .records
        .column_by_name("result")
        .unwrap()
        .as_primitive::<UInt32Type>()
        .value(0)
}

/// One XID 79 row.
pub(crate) fn xid_batch() -> EventBatch {
    xid_batch_with(&[xid_record(79, "0000:3b:00.0", "m")])
}

/// An XID row from the kernel log with the given code, bus id and message.
pub(crate) fn xid_record(code: u32, pci_bus_id: &str, message: &str) -> XidRecord {
    XidRecord {
        time_ns: 1_700_000_000_123_456_789,
        code,
        pci_bus_id: pci_bus_id.into(),
        gpu: None,
        message: message.into(),
        source: XidSource::Kmsg,
        pid: None,
        comm: None,
        reporter_pid: None,
        reporter_comm: None,
        kmsg_seq: None,
        message_truncated: false,
        ..XidRecord::new(XidSource::Kmsg)
    }
}

/// A batch of XID rows.
pub(crate) fn xid_batch_with(records: &[XidRecord]) -> EventBatch {
    EventBatch::new(EventKind::Xid, xid_batch_of(&identity(), records).unwrap())
}
