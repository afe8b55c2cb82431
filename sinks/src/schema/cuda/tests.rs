use super::*;
use arrow_array::cast::AsArray;
use arrow_array::types::{UInt32Type, UInt64Type};
use arrow_array::Array;

use crate::test_support::{cuda_row, identity};

fn row(function: &str) -> CudaRow<'_> {
    CudaRow {
        time_ns: 1_700_000_000_123_456_789,
        pid: 10,
        tid: 11,
        comm: "python3",
        function,
        duration_ns: 1500,
        result: 700,
        result_name: "CUDA_ERROR_ILLEGAL_ADDRESS",
        device_ptr: Some(0x7f00_0000_0000),
        launch: Some(LaunchDims {
            grid: [1, 2, 3],
            block: [4, 5, 6],
            shared_mem_bytes: 7,
            registers_only: false,
        }),
        ..cuda_row()
    }
}

#[test]
fn builds_rows_with_nulls_where_arguments_are_absent() {
    let mut builder = CudaBatchBuilder::new(identity(), 4);
    builder.append(&row("cuLaunchKernel"));
    let mut other = row("cuCtxSynchronize");
    other.launch = None;
    other.device_ptr = None;
    other.bytes = Some(4096);
    builder.append(&other);
    assert_eq!(builder.len(), 2);
    let batch = builder.finish().unwrap();
    assert!(builder.is_empty());
    assert_eq!(batch.num_rows(), 2);
    assert_eq!(batch.schema().metadata()["gpuship.kind"], "cuda");
    let functions = batch.column_by_name("function").unwrap().as_string::<i32>();
    assert_eq!(functions.value(0), "cuLaunchKernel");
    assert_eq!(functions.value(1), "cuCtxSynchronize");
    let bytes = batch
        .column_by_name("bytes")
        .unwrap()
        .as_primitive::<UInt64Type>();
    assert!(bytes.is_null(0));
    assert_eq!(bytes.value(1), 4096);
    let grid_z = batch
        .column_by_name("grid_z")
        .unwrap()
        .as_primitive::<UInt32Type>();
    assert_eq!(grid_z.value(0), 3);
    assert!(grid_z.is_null(1));
    let host = batch.column_by_name("host").unwrap().as_string::<i32>();
    assert_eq!(host.value(1), &*identity().host);
    let time = batch
        .column_by_name("time")
        .unwrap()
        .as_primitive::<arrow_array::types::TimestampMicrosecondType>();
    assert_eq!(time.value(0), 1_700_000_000_123_456);
}

/// A launch of which only the register arguments were read has its grid and block x/y;
/// block z and the shared memory are nulls, never zeros that would read as real values.
#[test]
fn register_only_launches_write_nulls_for_the_stack_arguments() {
    let mut builder = CudaBatchBuilder::new(identity(), 2);
    let mut recorded = row("cuLaunchKernel");
    recorded.launch = Some(LaunchDims {
        grid: [u32::MAX, 2, 3],
        block: [1024, 1, 99],
        shared_mem_bytes: 99,
        registers_only: true,
    });
    builder.append(&recorded);
    let batch = builder.finish().unwrap();
    let column = |name: &str| {
        let values = batch
            .column_by_name(name)
            .unwrap()
            .as_primitive::<UInt32Type>();
        (!values.is_null(0)).then(|| values.value(0))
    };
    let dims: Vec<Option<u32>> = [
        "grid_x",
        "grid_y",
        "grid_z",
        "block_x",
        "block_y",
        "block_z",
        "shared_mem_bytes",
    ]
    .into_iter()
    .map(column)
    .collect();
    assert_eq!(
        dims,
        vec![
            Some(u32::MAX),
            Some(2),
            Some(3),
            Some(1024),
            Some(1),
            None,
            None
        ]
    );
}

/// Ordinary rows are `false` (linked or not); flight-recorded rows `true` with their
/// incident; the column is the schema's last, and every other column is the same as for
/// an ordinary row.
#[test]
fn flight_recorded_rows_are_marked_with_their_incident() {
    let mut builder = CudaBatchBuilder::new(identity(), 4);
    builder.append(&row("cuLaunchKernel"));
    builder.append_linked(&row("cuCtxSynchronize"), Some("h/0000:3b:00.0/5"));
    builder.append_flight_recorded(&row("cuLaunchKernel"), "h/0000:3b:00.0/5");
    builder.append_flight_recorded(&row("cuMemcpyAsync"), "h/0000:86:00.0/9");
    let estimated = builder.estimated_bytes();
    assert_eq!(
        estimated,
        4 * (FIXED_ROW_BYTES + 7 + 26) + 14 + 16 + 14 + 13
    );
    let batch = builder.finish().unwrap();
    let schema = batch.schema();
    let marker = schema.field_with_name("flight_recorder").unwrap();
    assert_eq!(
        (marker.data_type(), marker.is_nullable()),
        (&DataType::Boolean, true)
    );
    // Schema version 5's and 6's columns come after it.
    let last: Vec<&str> = schema.fields()[schema.fields().len() - 10..]
        .iter()
        .map(|f| f.name().as_str())
        .collect();
    assert_eq!(
        last,
        [
            "flight_recorder",
            "handle",
            "parent_handle",
            "kernel_name",
            "kernel_name_demangled",
            "gpu_uuid",
            "pci_bus_id",
            "gpu_index",
            "held_memory",
            "largest_allocations"
        ]
    );
    assert_eq!(batch.num_columns(), schema.fields().len());
    assert_eq!(schema.metadata()[super::super::SCHEMA_VERSION_KEY], "7");
    let marks = batch
        .column_by_name("flight_recorder")
        .unwrap()
        .as_boolean();
    assert_eq!(marks.null_count(), 0);
    assert_eq!(
        marks.iter().collect::<Vec<_>>(),
        [Some(false), Some(false), Some(true), Some(true)]
    );
    let incidents = batch
        .column_by_name("incident_id")
        .unwrap()
        .as_string::<i32>();
    assert_eq!(
        incidents.iter().collect::<Vec<_>>(),
        [
            None,
            Some("h/0000:3b:00.0/5"),
            Some("h/0000:3b:00.0/5"),
            Some("h/0000:86:00.0/9")
        ]
    );
    // The copy is the call: only the two marker columns differ from an ordinary row.
    let mut plain = CudaBatchBuilder::new(identity(), 1);
    plain.append(&row("cuLaunchKernel"));
    let plain = plain.finish().unwrap();
    for (i, field) in schema.fields().iter().enumerate() {
        if ["incident_id", "flight_recorder"].contains(&field.name().as_str()) {
            continue;
        }
        assert_eq!(
            batch.column(i).slice(2, 1).to_data(),
            plain.column(i).to_data(),
            "{}",
            field.name()
        );
    }
}

#[test]
fn finish_twice_gives_an_empty_second_batch() {
    let mut builder = CudaBatchBuilder::new(identity(), 1);
    builder.append(&row("cuInit"));
    assert_eq!(builder.finish().unwrap().num_rows(), 1);
    assert_eq!(builder.finish().unwrap().num_rows(), 0);
    assert_eq!(builder.estimated_bytes(), 0);
}

#[test]
fn a_calls_gpu_fills_three_columns_and_an_unknown_one_three_nulls() {
    let listed = CallGpu {
        uuid: "GPU-fedcba98-7654-3210-0123-456789abcdef".into(),
        pci_bus_id: Some("0000:3b:00.0".into()),
        index: Some(i32::MAX),
    };
    let unlisted = CallGpu {
        uuid: "GPU-11111111-1111-1111-1111-111111111111".into(),
        pci_bus_id: None,
        index: None,
    };
    let mut builder = CudaBatchBuilder::new(identity(), 3);
    for gpu in [Some(&listed), Some(&unlisted), None] {
        let mut call = row("cuLaunchKernel");
        call.objects.gpu = gpu;
        builder.append(&call);
    }
    let before = builder.estimated_bytes();
    let batch = builder.finish().unwrap();
    assert_eq!(before, 3 * (FIXED_ROW_BYTES + 7 + 14 + 26) + (40 + 12) + 40);
    let text = |name: &str| {
        batch
            .column_by_name(name)
            .unwrap()
            .as_string::<i32>()
            .iter()
            .map(|v| v.map(str::to_string))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        text("gpu_uuid"),
        [Some(listed.uuid.clone()), Some(unlisted.uuid.clone()), None]
    );
    assert_eq!(
        text("pci_bus_id"),
        [Some("0000:3b:00.0".to_string()), None, None]
    );
    let index = batch
        .column_by_name("gpu_index")
        .unwrap()
        .as_primitive::<arrow_array::types::Int32Type>();
    assert_eq!(
        index.iter().collect::<Vec<_>>(),
        [Some(i32::MAX), None, None]
    );
}

#[test]
fn held_memory_is_on_its_row_only_and_null_elsewhere() {
    let held = HeldMemory {
        bytes: [1, 2, 3, 4, u64::MAX],
        seen_from_start: true,
        largest: vec![
            LargeAllocation {
                address: u64::MAX,
                bytes: Some(u64::MAX),
                kind: "physical",
                function: "cuMemCreate".into(),
                time_ns: i64::MIN,
            },
            LargeAllocation {
                address: 0x7f00_0000_0000,
                bytes: None,
                kind: "device",
                function: "cuMemAllocPitch_v2".into(),
                time_ns: 5,
            },
        ],
    };
    let mut builder = CudaBatchBuilder::new(identity(), 3);
    builder.append(&row("cuLaunchKernel"));
    let mut failed = row("cuMemAlloc_v2");
    failed.objects.memory = Some(&held);
    builder.append(&failed);
    builder.append(&row("cuLaunchKernel"));
    let batch = builder.finish().unwrap();
    let column = batch.column_by_name("held_memory").unwrap().as_struct();
    assert_eq!(
        (0..3).map(|i| column.is_valid(i)).collect::<Vec<_>>(),
        [false, true, false]
    );
    let kinds: Vec<u64> = MEMORY_KINDS
        .iter()
        .map(|kind| {
            column
                .column_by_name(&format!("{kind}_bytes"))
                .unwrap()
                .as_primitive::<UInt64Type>()
                .value(1)
        })
        .collect();
    assert_eq!(kinds, [1, 2, 3, 4, u64::MAX]);
    let list = batch
        .column_by_name("largest_allocations")
        .unwrap()
        .as_list::<i32>();
    assert_eq!(
        (0..3).map(|i| list.is_valid(i)).collect::<Vec<_>>(),
        [false, true, false]
    );
    let items = list.value(1);
    let items = items.as_struct();
    assert_eq!(items.len(), 2);
    let bytes = items
        .column_by_name("bytes")
        .unwrap()
        .as_primitive::<UInt64Type>();
    assert_eq!(bytes.iter().collect::<Vec<_>>(), [Some(u64::MAX), None]);
    let functions = items.column_by_name("function").unwrap().as_string::<i32>();
    assert_eq!(
        functions.iter().collect::<Vec<_>>(),
        [Some("cuMemCreate"), Some("cuMemAllocPitch_v2")]
    );
    // A second batch starts without it.
    let mut builder2 = CudaBatchBuilder::new(identity(), 1);
    builder2.append(&row("cuLaunchKernel"));
    let batch2 = builder2.finish().unwrap();
    assert_eq!(
        batch2.column_by_name("held_memory").unwrap().null_count(),
        1
    );
}

/// A builder used again after `finish` starts with every column allocated at its capacity
/// (Arrow's builders give their buffers away) and builds the next batch from its own rows.
#[test]
fn the_next_batch_starts_at_the_capacity_with_only_its_rows() {
    let mut builder = CudaBatchBuilder::new(identity(), 1_024);
    builder.append(&row("cuLaunchKernel"));
    builder.append(&row("cuMemAlloc_v2"));
    assert_eq!(builder.finish().unwrap().num_rows(), 2);
    assert!(
        builder.pid.capacity() >= 1_024,
        "{}",
        builder.pid.capacity()
    );
    assert!(builder.common.len() == 0 && builder.estimated_bytes() == 0);
    builder.append(&row("cuMemFree_v2"));
    let batch = builder.finish().unwrap();
    assert_eq!(batch.num_rows(), 1);
    let functions = batch.column_by_name("function").unwrap().as_string::<i32>();
    assert_eq!(functions.value(0), "cuMemFree_v2");
    let hosts = batch.column_by_name("host").unwrap().as_string::<i32>();
    assert_eq!(hosts.value(0), &*identity().host);
    assert_eq!(batch.schema(), schema());
}
