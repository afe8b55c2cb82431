//! Rows, host identities and batches for tests and benches, in one place: this crate's unit
//! tests use it directly; the agent's tests and benches through the `test-support` feature
//! (enabled from the root crate's dev-dependencies only, never in a release build).
//!
//! Everything here builds fixed, readable values and panics on a builder error: it is for
//! tests, and nothing that ships may call it.

use arrow_array::cast::AsArray;
use arrow_array::types::UInt32Type;

use crate::schema::{
    xid_batch_of, CallGpu, CudaBatchBuilder, CudaRow, HostIdentity, XidRecord, XidSource,
};
use crate::{EventBatch, EventKind};

/// The host every test row comes from unless the test names one: host `h`, boot id `b`.
pub fn identity() -> HostIdentity {
    host_identity("h", "b")
}

/// A host identity with the given names (for lakes whose file names or views show the host,
/// and for benches that want realistic sizes).
pub fn host_identity(host: &str, boot_id: &str) -> HostIdentity {
    HostIdentity {
        host: host.into(),
        boot_id: boot_id.into(),
    }
}

/// A GPU the node lists, as the agent gives it to a call's row: UUID, bus id and nvidia-smi
/// index (for rows with their GPU columns filled, as on a GPU node).
pub fn listed_gpu() -> CallGpu {
    CallGpu {
        uuid: "GPU-5e3c1a2b-7d4f-4a1e-9c8b-2f6d0e1a3b4c".to_string(),
        pci_bus_id: Some("00000000:3B:00.0".to_string()),
        index: Some(3),
    }
}

/// A successful `cuLaunchKernel` of pid/tid 1 (`python3`) at time 0, lasting 5 ns, with no
/// arguments: override what the test is about with struct-update syntax,
/// `CudaRow { function: "cuMemAlloc_v2", bytes: Some(4096), ..cuda_row() }`.
pub fn cuda_row() -> CudaRow<'static> {
    CudaRow {
        time_ns: 0,
        pid: 1,
        tid: 1,
        comm: "python3",
        function: "cuLaunchKernel",
        duration_ns: 5,
        result: 0,
        result_name: "CUDA_SUCCESS",
        bytes: None,
        device_ptr: None,
        stream: None,
        launch: None,
        workload: None,
        objects: Default::default(),
    }
}

/// An XID from the kernel log with the given code, bus id and message, at a fixed time
/// (2023-11-14T22:13:20.123456789Z) and with nothing else known: override the rest with
/// struct-update syntax, `XidRecord { pid: Some(7), ..xid_record(79, "0000:3b:00.0", "m") }`.
pub fn xid_record(code: u32, pci_bus_id: &str, message: &str) -> XidRecord {
    XidRecord {
        time_ns: 1_700_000_000_123_456_789,
        code,
        pci_bus_id: pci_bus_id.into(),
        message: message.into(),
        ..XidRecord::new(XidSource::Kmsg)
    }
}

/// `rows` CUDA calls whose result code is `tag` (to tell batches apart) and whose time and
/// byte count are the row index (to check round trips).
pub fn cuda_batch(rows: usize, tag: u32) -> EventBatch {
    let mut builder = CudaBatchBuilder::new(identity(), rows);
    for i in 0..rows {
        builder.append(&CudaRow {
            time_ns: i as i64,
            comm: "c",
            result: tag,
            result_name: "x",
            bytes: Some(i as u64),
            ..cuda_row()
        });
    }
    EventBatch::new(EventKind::Cuda, builder.finish().unwrap())
}

/// `rows` driver ioctls whose time is the row index.
pub fn driver_batch(rows: usize) -> EventBatch {
    use crate::schema::{DriverBatchBuilder, DriverRow};
    let mut builder = DriverBatchBuilder::new(identity());
    for i in 0..rows {
        builder.append(DriverRow {
            time_ns: i as i64,
            pid: 1,
            tid: 1,
            comm: "c".into(),
            hook: "ioctl".into(),
            device: None,
            major: None,
            minor: None,
            fd: None,
            request: None,
            request_dir: None,
            request_type: None,
            request_nr: None,
            request_size: None,
            request_name: None,
            duration_ns: 1,
            result: Some(0),
            workload: None,
        });
    }
    EventBatch::new(EventKind::Driver, builder.finish().unwrap())
}

/// The tag of a batch made by [`cuda_batch`].
pub fn result_tag(batch: &EventBatch) -> u32 {
    batch
        .records
        .column_by_name("result")
        .unwrap()
        .as_primitive::<UInt32Type>()
        .value(0)
}

/// One XID 79 row.
pub fn xid_batch() -> EventBatch {
    xid_batch_with(&[xid_record(79, "0000:3b:00.0", "m")])
}

/// A batch of XID rows from [`identity`].
pub fn xid_batch_with(records: &[XidRecord]) -> EventBatch {
    EventBatch::new(EventKind::Xid, xid_batch_of(&identity(), records).unwrap())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuda_batches_carry_their_tag_and_row_count() {
        let batch = cuda_batch(3, 17);
        assert_eq!(batch.records.num_rows(), 3);
        assert_eq!(result_tag(&batch), 17);
    }

    #[test]
    fn an_xid_record_is_a_kmsg_report_of_its_code_and_bus() {
        let record = xid_record(48, "0000:86:00.0", "DBE");
        assert_eq!(
            (record.code, record.pci_bus_id.as_str(), record.source),
            (48, "0000:86:00.0", XidSource::Kmsg)
        );
        assert_eq!(xid_batch().records.num_rows(), 1);
    }
}
