//! Tests of the `xid` table builder.

use super::*;
use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, UInt32Type};
use arrow_array::Array;

use crate::test_support::{identity, xid_record};

#[test]
fn row_values_land_in_their_columns() {
    let gpu = Arc::new(GpuIdentity {
        uuid: "GPU-1234".into(),
        model: "NVIDIA H100".into(),
        index: 0,
        minor: Some(0),
    });
    let records = [
        XidRecord {
            time_ns: 1_000,
            gpu: Some(gpu),
            kmsg_seq: Some(42),
            ..xid_record(79, "0000:3b:00.0", "GPU has fallen off the bus.")
        },
        XidRecord {
            time_ns: 2_000,
            source: XidSource::Tracepoint,
            pid: Some(468),
            comm: Some("python3".into()),
            reporter_pid: Some(12),
            reporter_comm: Some("irq/nvidia".into()),
            kmsg_seq: None,
            message_truncated: true,
            annotations: XidAnnotations {
                incident_id: Some("inc-1".into()),
                root_candidate: Some(true),
                affected_pids: vec![468, 469],
                details: XidDetails {
                    fault_address: Some(0x7f00_0000_0000),
                    ..Default::default()
                },
                ..Default::default()
            },
            ..xid_record(31, "0000:00:06.0", "MMU Fault")
        },
    ];
    let batch = batch_of(&identity(), &records).unwrap();
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
    let incident = batch
        .column_by_name("incident_id")
        .unwrap()
        .as_string::<i32>();
    assert!(incident.is_null(0));
    assert_eq!(incident.value(1), "inc-1");
    let affected = batch
        .column_by_name("affected_pids")
        .unwrap()
        .as_list::<i32>();
    assert!(affected.is_null(0));
    assert_eq!(
        affected
            .value(1)
            .as_primitive::<Int32Type>()
            .values()
            .to_vec(),
        [468, 469]
    );
    let address = batch
        .column_by_name("fault_address")
        .unwrap()
        .as_primitive::<arrow_array::types::UInt64Type>();
    assert_eq!(address.value(1), 0x7f00_0000_0000);
    assert_eq!(batch.num_columns(), schema().fields().len());
}

#[test]
fn suspects_are_a_list_of_structs_null_when_not_looked_for() {
    let suspect = |name: &str, time_ns: i64, completed: bool| KernelSuspect {
        time_ns,
        tid: i32::MAX,
        function: "cuLaunchKernel".into(),
        handle: u64::MAX,
        kernel_name: format!("_Z{}{name}v", name.len()),
        kernel_name_demangled: format!("{name}()"),
        stream: None,
        grid: [Some(u32::MAX), Some(1), None],
        block: [Some(128), None, None],
        completed,
    };
    let with = |suspects: Option<Vec<KernelSuspect>>, suspects_sampled| XidRecord {
        annotations: XidAnnotations {
            suspects,
            suspects_sampled,
            ..XidAnnotations::default()
        },
        ..xid_record(31, "0000:3b:00.0", "MMU Fault")
    };
    let records = [
        with(None, None),
        with(
            Some(vec![
                suspect("b", i64::MAX, false),
                suspect("a\n\u{1b}[31m", i64::MIN, true),
            ]),
            Some(true),
        ),
        with(Some(Vec::new()), Some(false)),
    ];
    let batch = batch_of(&identity(), &records).unwrap();
    let list = batch.column_by_name("suspects").unwrap().as_list::<i32>();
    assert!(list.is_null(0));
    assert_eq!((list.value_length(1), list.value_length(2)), (2, 0));
    assert!(!list.is_null(2));
    let items = list.value(1);
    let items = items.as_struct();
    let names = items.column_by_name("kernel_name_demangled").unwrap();
    let names = names.as_string::<i32>();
    assert_eq!((names.value(0), names.value(1)), ("b()", "a\n\u{1b}[31m()"));
    let grid_z = items.column_by_name("grid_z").unwrap();
    assert!(grid_z.is_null(0));
    let first = batch
        .column_by_name("suspect_kernel")
        .unwrap()
        .as_string::<i32>();
    assert!(first.is_null(0) && first.is_null(2));
    assert_eq!(first.value(1), "b()");
    let sampled = batch
        .column_by_name("suspects_sampled")
        .unwrap()
        .as_boolean();
    assert!(sampled.is_null(0));
    assert_eq!((sampled.value(1), sampled.value(2)), (true, false));
    // JSON (Kafka, jsonl): an array of objects, every field present.
    let mut rows = crate::encode::json::JsonRows::new(&batch, None).unwrap();
    let mut out = Vec::new();
    rows.write_row(1, &mut out);
    let value: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(value["suspect_kernel"], "b()");
    assert_eq!(value["suspects_sampled"], true);
    assert_eq!(value["suspects"][0]["handle"], u64::MAX);
    assert_eq!(value["suspects"][0]["grid_x"], u32::MAX);
    assert_eq!(value["suspects"][0]["grid_z"], serde_json::Value::Null);
    assert_eq!(value["suspects"][1]["time_ns"], i64::MIN);
    assert_eq!(value["suspects"][1]["completed"], true);
    let mut out = Vec::new();
    rows.write_row(0, &mut out);
    let value: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(value["suspects"], serde_json::Value::Null);
    assert_eq!(value["suspects_sampled"], serde_json::Value::Null);
}

#[test]
fn the_headline_suspect_is_the_first_not_seen_to_finish() {
    let suspect = |name: &str, completed: bool| KernelSuspect {
        kernel_name_demangled: name.into(),
        completed,
        ..KernelSuspect::default()
    };
    let pick = |list: &[KernelSuspect]| {
        KernelSuspect::headline(list).map(|s| s.kernel_name_demangled.clone())
    };
    let list = [suspect("x", true), suspect("y", false), suspect("z", false)];
    assert_eq!(pick(&list).as_deref(), Some("y"));
    assert_eq!(
        pick(&[suspect("x", true), suspect("w", true)]).as_deref(),
        Some("x")
    );
    assert_eq!(pick(&[]), None);
    // The column names the same one.
    let record = XidRecord {
        annotations: XidAnnotations {
            suspects: Some(list.to_vec()),
            ..XidAnnotations::default()
        },
        ..xid_record(31, "0000:3b:00.0", "MMU Fault")
    };
    let batch = batch_of(&identity(), &[record]).unwrap();
    let first = batch.column_by_name("suspect_kernel").unwrap();
    assert_eq!(first.as_string::<i32>().value(0), "y");
}
