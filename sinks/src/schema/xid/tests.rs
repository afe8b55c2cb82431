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
