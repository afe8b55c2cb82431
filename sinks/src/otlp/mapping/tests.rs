//! Tests of the OTLP mapping: log records, attributes and resources for every kind.

use super::*;
use crate::schema::{CudaBatchBuilder, CudaRow, LaunchDims};
use crate::test_support::{cuda_row, identity, xid_batch_with, xid_record};

fn attributes(record: &LogRecord) -> BTreeMap<&str, &Value> {
    record
        .attributes
        .iter()
        .map(|kv| {
            (
                kv.key.as_str(),
                kv.value.as_ref().unwrap().value.as_ref().unwrap(),
            )
        })
        .collect()
}

fn string(value: &str) -> Value {
    Value::StringValue(value.into())
}

fn body(record: &LogRecord) -> &str {
    match record.body.as_ref().unwrap().value.as_ref().unwrap() {
        Value::StringValue(text) => text,
        other => panic!("body is {other:?}"),
    }
}

#[test]
fn resource_has_service_host_and_user_attributes() {
    let extra = BTreeMap::from([
        ("k8s.node.name".to_string(), "node-7".to_string()),
        ("service.name".to_string(), "gpu-agent".to_string()),
    ]);
    let mapping = OtlpMapping::new(&identity(), Some("machine-1"), &extra);
    let request = mapping.request(Vec::new());
    let resource = request.resource_logs[0].resource.as_ref().unwrap();
    let attributes: BTreeMap<&str, &Value> = resource
        .attributes
        .iter()
        .map(|kv| {
            (
                kv.key.as_str(),
                kv.value.as_ref().unwrap().value.as_ref().unwrap(),
            )
        })
        .collect();
    assert_eq!(attributes["service.name"], &string("gpu-agent"));
    assert_eq!(
        attributes["service.version"],
        &string(env!("CARGO_PKG_VERSION"))
    );
    assert_eq!(attributes["host.name"], &string("h"));
    assert_eq!(attributes["host.id"], &string("machine-1"));
    assert_eq!(attributes["host.boot.id"], &string("b"));
    assert_eq!(attributes["k8s.node.name"], &string("node-7"));
    assert_eq!(attributes.len(), 6);
    let scope = request.resource_logs[0].scope_logs[0]
        .scope
        .as_ref()
        .unwrap();
    assert_eq!(scope.name, "gpuship");
}

#[test]
fn xid_rows_become_error_records_with_gpu_attributes() {
    let mut record = xid_record(79, "0000:3b:00.0", "GPU has fallen off the bus.");
    record.pid = Some(4242);
    record.comm = Some("python3".into());
    record.annotations.severity = Some("fatal".into());
    record.annotations.incident_id = Some("h/0000:3b:00.0/1".into());
    record.annotations.affected_pids = vec![4242, 4243];
    let batch = xid_batch_with(&[record, xid_record(31, "0000:86:00.0", "MMU Fault")]);
    let mapping = OtlpMapping::new(&identity(), None, &BTreeMap::new());
    let request = mapping.batch_request(EventKind::Xid, &batch.records, 42);
    let records = &request.resource_logs[0].scope_logs[0].log_records;
    assert_eq!(records.len(), 2);
    let first = &records[0];
    assert_eq!(first.event_name, "gpu.xid");
    assert_eq!(first.time_unix_nano, 1_700_000_000_123_456_789);
    assert_eq!(first.observed_time_unix_nano, 42);
    assert_eq!(first.severity_number, severity::FATAL);
    assert_eq!(first.severity_text, "FATAL");
    assert_eq!(
        body(first),
        "XID 79 on GPU 0000:3b:00.0: GPU has fallen off the bus."
    );
    let attributes = attributes(first);
    assert_eq!(attributes["gpu.xid.code"], &Value::IntValue(79));
    assert_eq!(attributes["gpu.pci_bus_id"], &string("0000:3b:00.0"));
    assert_eq!(
        attributes["gpu.xid.message"],
        &string("GPU has fallen off the bus.")
    );
    assert_eq!(attributes["gpu.xid.source"], &string("kmsg"));
    assert_eq!(attributes["process.pid"], &Value::IntValue(4242));
    assert_eq!(attributes["process.executable.name"], &string("python3"));
    assert_eq!(
        attributes["gpu.xid.message_truncated"],
        &Value::BoolValue(false)
    );
    // Nulls (no GPU identity, no reporter, no kmsg sequence) are left out.
    assert!(!attributes.contains_key("hw.id"));
    assert!(!attributes.contains_key("gpu.xid.reporter.pid"));
    assert_eq!(attributes["gpu.xid.severity"], &string("fatal"));
    assert_eq!(
        attributes["gpu.xid.incident_id"],
        &string("h/0000:3b:00.0/1")
    );
    let Value::ArrayValue(pids) = attributes["gpu.xid.affected_pids"] else {
        panic!("affected pids are an array");
    };
    let pids: Vec<&Value> = pids
        .values
        .iter()
        .map(|v| v.value.as_ref().unwrap())
        .collect();
    assert_eq!(pids, [&Value::IntValue(4242), &Value::IntValue(4243)]);
    assert_eq!(attributes.len(), 10);
    // Without a catalog severity an XID is an ERROR.
    assert_eq!(records[1].severity_number, severity::ERROR);
    assert_eq!(body(&records[1]), "XID 31 on GPU 0000:86:00.0: MMU Fault");
}

fn cuda_rows() -> arrow_array::RecordBatch {
    let mut builder = CudaBatchBuilder::new(identity(), 2);
    let pod = crate::schema::Workload {
        container_id: Some("c0ffee".into()),
        pod_uid: Some("1b2c3d4e-5f60-4a1b-9c8d-7e6f5a4b3c2d".into()),
        pod_name: Some("trainer-0".into()),
        pod_namespace: Some("ml-team".into()),
    };
    let base = CudaRow {
        time_ns: 5_000,
        pid: 77,
        tid: 78,
        comm: "train",
        function: "cuLaunchKernel",
        duration_ns: 12_500,
        stream: Some(0xabc),
        launch: Some(LaunchDims {
            grid: [64, 2, 1],
            block: [256, 1, 1],
            shared_mem_bytes: 1024,
            registers_only: false,
        }),
        ..cuda_row()
    };
    builder.append(&base);
    builder.append(&CudaRow {
        function: "cuMemAlloc_v2",
        duration_ns: 3_200_000,
        result: 2,
        result_name: "CUDA_ERROR_OUT_OF_MEMORY",
        bytes: Some(1 << 30),
        stream: None,
        launch: None,
        workload: Some(&pod),
        ..base
    });
    builder.finish().unwrap()
}

#[test]
fn cuda_calls_map_severity_from_their_result() {
    let batch = cuda_rows();
    let mapping = OtlpMapping::new(&identity(), None, &BTreeMap::new());
    let request = mapping.batch_request(EventKind::Cuda, &batch, 9);
    let records = &request.resource_logs[0].scope_logs[0].log_records;
    let launch = &records[0];
    assert_eq!(launch.event_name, "cuda.call");
    assert_eq!(launch.severity_number, severity::DEBUG);
    assert_eq!(
        body(launch),
        "cuLaunchKernel returned CUDA_SUCCESS after 12.5 µs"
    );
    let attributes = attributes(launch);
    assert_eq!(attributes["process.pid"], &Value::IntValue(77));
    assert_eq!(attributes["thread.id"], &Value::IntValue(78));
    assert_eq!(attributes["cuda.function"], &string("cuLaunchKernel"));
    assert_eq!(attributes["cuda.result"], &Value::IntValue(0));
    assert_eq!(attributes["cuda.stream"], &Value::IntValue(0xabc));
    assert_eq!(attributes["cuda.grid.x"], &Value::IntValue(64));
    assert_eq!(attributes["cuda.block.x"], &Value::IntValue(256));
    assert_eq!(attributes["cuda.shared_mem_bytes"], &Value::IntValue(1024));
    assert!(!attributes.contains_key("error.type"));
    assert!(!attributes.contains_key("k8s.pod.name"), "no workload");
    let alloc = &records[1];
    assert_eq!(alloc.severity_number, severity::ERROR);
    assert_eq!(
        body(alloc),
        "cuMemAlloc_v2 returned CUDA_ERROR_OUT_OF_MEMORY after 3.2 ms"
    );
    let attributes = super::tests::attributes(alloc);
    assert_eq!(
        attributes["error.type"],
        &string("CUDA_ERROR_OUT_OF_MEMORY")
    );
    assert_eq!(attributes["cuda.bytes"], &Value::IntValue(1 << 30));
    assert!(!attributes.contains_key("cuda.grid.x"));
    assert_eq!(attributes["container.id"], &string("c0ffee"));
    assert_eq!(
        attributes["k8s.pod.uid"],
        &string("1b2c3d4e-5f60-4a1b-9c8d-7e6f5a4b3c2d")
    );
    assert_eq!(attributes["k8s.pod.name"], &string("trainer-0"));
    assert_eq!(attributes["k8s.namespace.name"], &string("ml-team"));
}

/// `cuda.flight_recorder` is sent only on the rows the flight recorder wrote; the ordinary
/// rows (`false`) and rows of files before the column (null) have no such attribute.
#[test]
fn the_flight_recorder_attribute_is_sent_only_when_true() {
    let mut builder = CudaBatchBuilder::new(identity(), 2);
    let call = CudaRow {
        time_ns: 5_000,
        function: "cuLaunchKernel",
        ..cuda_row()
    };
    builder.append(&call);
    builder.append_flight_recorded(&call, "h/0000:3b:00.0/4000");
    let batch = builder.finish().unwrap();
    let mapping = OtlpMapping::new(&identity(), None, &BTreeMap::new());
    let request = mapping.batch_request(EventKind::Cuda, &batch, 9);
    let records = &request.resource_logs[0].scope_logs[0].log_records;
    let ordinary = attributes(&records[0]);
    assert!(
        !ordinary.contains_key("cuda.flight_recorder"),
        "{ordinary:?}"
    );
    assert!(!ordinary.contains_key("gpu.xid.incident_id"));
    let recorded = attributes(&records[1]);
    assert_eq!(
        recorded["cuda.flight_recorder"],
        &Value::BoolValue(true),
        "{recorded:?}"
    );
    assert_eq!(
        recorded["gpu.xid.incident_id"],
        &string("h/0000:3b:00.0/4000")
    );
    // The same attributes otherwise: the marker and the incident are all that differ.
    assert_eq!(recorded.len(), ordinary.len() + 2);
    assert_eq!(records[0].body, records[1].body);
    assert_eq!(records[1].severity_number, severity::DEBUG);
    // A batch without the column (an older writer's) sends no marker at all.
    let marker = batch.schema().index_of("flight_recorder").unwrap();
    let without = batch
        .project(
            &(0..batch.num_columns())
                .filter(|&i| i != marker)
                .collect::<Vec<_>>(),
        )
        .unwrap();
    let request = mapping.batch_request(EventKind::Cuda, &without, 9);
    let records = &request.resource_logs[0].scope_logs[0].log_records;
    assert!(!attributes(&records[1]).contains_key("cuda.flight_recorder"));
    assert_eq!(attributes(&records[1]).len(), ordinary.len() + 1);
}

#[test]
fn selected_rows_only() {
    let batch = cuda_rows();
    let mapping = OtlpMapping::new(&identity(), None, &BTreeMap::new());
    let mut records = Vec::new();
    mapping.append_records(EventKind::Cuda, &batch, 0, Some(&[1]), &mut records);
    assert_eq!(records.len(), 1);
    assert_eq!(body(&records[0]).split(' ').next(), Some("cuMemAlloc_v2"));
}

#[test]
fn durations_read_well() {
    assert_eq!(human_duration(850), "850 ns");
    assert_eq!(human_duration(12_500), "12.5 µs");
    assert_eq!(human_duration(3_200_000), "3.2 ms");
    assert_eq!(human_duration(1_500_000_000), "1.50 s");
}

#[test]
fn an_xid_s_suspects_are_an_array_of_maps_without_their_null_fields() {
    let mut record = xid_record(31, "0000:3b:00.0", "MMU Fault");
    record.annotations.suspects = Some(vec![crate::schema::KernelSuspect {
        time_ns: 5,
        tid: 9,
        function: "cuLaunchKernel".into(),
        handle: 0x6b00_0000,
        kernel_name: "wild_write".into(),
        kernel_name_demangled: "wild_write".into(),
        stream: None,
        grid: [Some(1), Some(1), Some(1)],
        block: [Some(1), Some(1), None],
        completed: false,
    }]);
    let batch = xid_batch_with(&[record, xid_record(79, "0000:3b:00.0", "off the bus")]);
    let mapping = OtlpMapping::new(&identity(), None, &BTreeMap::new());
    let request = mapping.batch_request(EventKind::Xid, &batch.records, 42);
    let records = &request.resource_logs[0].scope_logs[0].log_records;
    let first = attributes(&records[0]);
    assert_eq!(first["gpu.xid.suspect_kernel"], &string("wild_write"));
    let Value::ArrayValue(list) = first["gpu.xid.suspects"] else {
        panic!("{first:?}");
    };
    assert_eq!(list.values.len(), 1);
    let Some(Value::KvlistValue(fields)) = &list.values[0].value else {
        panic!("{list:?}");
    };
    let fields: BTreeMap<&str, &Value> = fields
        .values
        .iter()
        .map(|kv| {
            (
                kv.key.as_str(),
                kv.value.as_ref().unwrap().value.as_ref().unwrap(),
            )
        })
        .collect();
    assert_eq!(fields["kernel_name_demangled"], &string("wild_write"));
    assert_eq!(fields["handle"], &Value::IntValue(0x6b00_0000));
    assert_eq!(fields["completed"], &Value::BoolValue(false));
    assert_eq!(fields["time_ns"], &Value::IntValue(5));
    // Null fields are left out.
    assert!(!fields.contains_key("stream") && !fields.contains_key("block_z"));
    assert_eq!(fields.len(), 12);
    // No suspects looked for: no attribute.
    let second = attributes(&records[1]);
    assert!(!second.contains_key("gpu.xid.suspects"));
    assert!(!second.contains_key("gpu.xid.suspect_kernel"));
}
