//! Rows for the views' unit tests, built with the sinks' own batch builders so they have
//! exactly the columns the agent writes, and carried over to the lake's arrow (the sinks may be
//! on a newer one) through Arrow IPC, as the schemas are (engine.rs).

use arrow_array::RecordBatch;
use gpuship_sinks::schema::{
    xid_batch_of, CudaBatchBuilder, CudaRow, CudaStatsBatchBuilder, CudaStatsRow, DurationBucket,
    DurationStats, HostIdentity, LaunchDims, XidRecord, XidSource,
};

use super::rows::NOT_CAPTURED;

/// A batch the sinks' builders made (their arrow) as a batch of the lake's arrow.
pub fn from_sinks(batch: &gpuship_sinks::arrow_array::RecordBatch) -> RecordBatch {
    let mut bytes = Vec::new();
    gpuship_sinks::encode::arrow_ipc::write_stream(batch, &mut bytes).unwrap();
    let mut reader = arrow_ipc::reader::StreamReader::try_new(bytes.as_slice(), None).unwrap();
    let out = reader.next().expect("one batch").unwrap();
    assert!(reader.next().is_none(), "one batch only");
    out
}

/// Host `node-a`.
pub fn identity() -> HostIdentity {
    HostIdentity {
        host: "node-a".into(),
        boot_id: "boot".into(),
    }
}

/// A call of pid 100, tid 101 (`train`) on stream 0x5000; launches get dims; a zero duration
/// makes it entry-only.
pub fn cuda_row(
    time_ns: i64,
    function: &'static str,
    result: u32,
    duration_ns: u64,
) -> CudaRow<'static> {
    CudaRow {
        time_ns,
        pid: 100,
        tid: 101,
        comm: "train",
        function,
        duration_ns,
        result,
        result_name: match (result, duration_ns) {
            (_, 0) => NOT_CAPTURED,
            (0, _) => "CUDA_SUCCESS",
            _ => "CUDA_ERROR_ILLEGAL_ADDRESS",
        },
        bytes: None,
        device_ptr: None,
        stream: Some(0x5000),
        launch: function.starts_with("cuLaunch").then_some(LaunchDims {
            grid: [1, 2, 3],
            block: [4, 5, 6],
            shared_mem_bytes: 0,
            registers_only: false,
        }),
        workload: None,
        objects: Default::default(),
    }
}

/// `rows` as one `cuda` batch.
pub fn cuda_batch(rows: &[CudaRow<'_>]) -> RecordBatch {
    let mut builder = CudaBatchBuilder::new(identity(), rows.len());
    for row in rows {
        builder.append(row);
    }
    from_sinks(&builder.finish().unwrap())
}

/// `rows` as one `cuda` batch of calls the flight recorder wrote when `incident_id` started.
pub fn recorded_batch(rows: &[CudaRow<'_>], incident_id: &str) -> RecordBatch {
    let mut builder = CudaBatchBuilder::new(identity(), rows.len());
    for row in rows {
        builder.append_flight_recorded(row, incident_id);
    }
    from_sinks(&builder.finish().unwrap())
}

/// An XID from the kernel log that hit pid 100 (`train`), root of its own incident.
pub fn xid_record(time_ns: i64, code: u32, bus: &str, severity: &str, message: &str) -> XidRecord {
    let mut record = XidRecord {
        time_ns,
        code,
        pci_bus_id: bus.into(),
        gpu: None,
        message: message.into(),
        source: XidSource::Kmsg,
        pid: Some(100),
        comm: Some("train".into()),
        reporter_pid: None,
        reporter_comm: None,
        kmsg_seq: None,
        message_truncated: false,
        raw_tracepoint: None,
        raw_kmsg: None,
        annotations: Default::default(),
    };
    record.annotations.severity = Some(severity.into());
    record.annotations.incident_id = Some(format!("node-a/{bus}/{time_ns}"));
    record.annotations.root_candidate = Some(true);
    record.annotations.affected_pids = vec![100];
    record
}

/// `records` as one `xid` batch.
pub fn xid_batch(records: &[XidRecord]) -> RecordBatch {
    from_sinks(&xid_batch_of(&identity(), records).unwrap())
}

/// Successful calls of pid 100 (`train`) over the 10 s interval that ends at `time_ns`, with
/// `buckets` as `(from_ns, to_ns, calls)`: the row's minimum is the first bucket's `from_ns`,
/// its maximum the last one's `to_ns - 1`, its sum `calls * from_ns` per bucket (no buckets: no
/// durations). p50/p99 are not read by the views.
pub fn stats_row(
    time_ns: i64,
    function: &str,
    calls: u64,
    buckets: &[(u64, u64, u64)],
) -> CudaStatsRow {
    let durations = (!buckets.is_empty()).then(|| DurationStats {
        sum_ns: buckets.iter().fold(0u64, |sum, &(from, _, n)| {
            sum.saturating_add(from.saturating_mul(n))
        }),
        min_ns: buckets[0].0,
        max_ns: buckets[buckets.len() - 1].1 - 1,
        p50_ns: 0,
        p99_ns: 0,
        buckets: buckets
            .iter()
            .map(|&(from_ns, to_ns, calls)| DurationBucket {
                from_ns,
                to_ns,
                calls,
            })
            .collect(),
    });
    CudaStatsRow {
        time_ns,
        interval_ns: 10_000_000_000,
        pid: 100,
        comm: "train".into(),
        function: function.into(),
        result: 0,
        result_name: "CUDA_SUCCESS".into(),
        calls,
        bytes_sum: None,
        durations,
        workload: None,
        observed_fraction: 1.0,
    }
}

/// `rows` as one `cuda_stats` batch of host `node-a`.
pub fn stats_batch(rows: &[CudaStatsRow]) -> RecordBatch {
    let mut builder = CudaStatsBatchBuilder::new(identity());
    for row in rows {
        builder.append(row.clone());
    }
    from_sinks(&builder.finish().unwrap())
}

/// `cuda_memory` rows of one host (the first row's) through the sinks' builder: the columns the
/// agent writes for `rows`, with each GPU's UUID, bus id and index.
pub fn memory_batch(rows: &[super::rows::MemoryHeld]) -> RecordBatch {
    let host = rows.first().map_or("node-a", |r| r.host.as_str());
    let mut builder = gpuship_sinks::schema::CudaMemoryBatchBuilder::new(HostIdentity {
        host: host.into(),
        boot_id: "boot".into(),
    });
    for row in rows {
        assert_eq!(row.host, host, "one host per batch");
        builder.append(gpuship_sinks::schema::CudaMemoryRow {
            time_ns: row.time_ns,
            pid: row.pid,
            comm: row.comm.clone(),
            gpu: row.gpu_uuid.as_ref().map(|uuid| {
                std::sync::Arc::new(gpuship_sinks::schema::CallGpu {
                    uuid: uuid.clone(),
                    pci_bus_id: row.pci_bus_id.clone(),
                    index: row.gpu_index,
                })
            }),
            bytes: [
                row.device_bytes,
                row.managed_bytes,
                row.host_pinned_bytes,
                row.pool_bytes,
                row.physical_bytes,
            ],
            allocations: row.allocations,
            seen_from_start: row.seen_from_start,
            workload: None,
        });
    }
    from_sinks(&builder.finish().expect("a cuda_memory batch"))
}
