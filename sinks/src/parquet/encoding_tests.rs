//! Tests of the Parquet sink's column encodings: every column of a varied CUDA batch is
//! written with the encoding chosen for it and read back exactly.

use std::fs::File;

use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::file::reader::{FileReader, SerializedFileReader};

use super::tests::parquet_files;
use super::*;
use crate::schema::{CudaBatchBuilder, CudaRow};
use crate::test_support::identity;
use crate::EventKind;

/// Rows with every column in use: launches and copies, failures, two threads, some in a pod,
/// calls on two GPUs (one not on the node's list) and some whose GPU is not known.
/// `count` batches of [`varied_cuda_batch`]'s rows, `rows` each; with `one_gpu`, every row is
/// on the node's listed GPU (one process on one GPU, as `gpuship run -- CMD` records).
pub(super) fn varied_cuda_batches(
    count: usize,
    rows: usize,
    one_gpu: bool,
) -> Vec<arrow_array::RecordBatch> {
    (0..count)
        .map(|_| varied_cuda_batch_on(rows, one_gpu))
        .collect()
}

fn varied_cuda_batch(rows: usize) -> arrow_array::RecordBatch {
    varied_cuda_batch_on(rows, false)
}

fn varied_cuda_batch_on(rows: usize, one_gpu: bool) -> arrow_array::RecordBatch {
    use crate::schema::cuda::{CallGpu, CallObjects};
    use crate::schema::{LaunchDims, Workload};
    let gpus = [
        crate::test_support::listed_gpu(),
        CallGpu {
            uuid: "GPU-00000000-0000-0000-0000-000000000001".into(),
            pci_bus_id: None,
            index: None,
        },
    ];
    let pod = Workload {
        container_id: Some("c0ffee".into()),
        pod_uid: Some("uid-1".into()),
        pod_name: Some("trainer-0".into()),
        pod_namespace: Some("ml".into()),
    };
    let mut builder = CudaBatchBuilder::new(identity(), rows);
    for i in 0..rows {
        let launch = i % 3 != 0;
        let failed = i % 97 == 0;
        builder.append_linked(
            &CudaRow {
                time_ns: 1_700_000_000_000_000_000 + i as i64 * 1_300,
                pid: 4000 + (i % 2) as i32,
                tid: 4100 + (i % 5) as i32,
                comm: if i % 2 == 0 {
                    "python3"
                } else {
                    "pt_main_thread"
                },
                function: if launch {
                    "cuLaunchKernel"
                } else {
                    "cuMemcpyHtoDAsync_v2"
                },
                duration_ns: 1_000 + (i as u64 * 7_919) % 50_000,
                result: if failed { 700 } else { 0 },
                result_name: if failed {
                    "CUDA_ERROR_ILLEGAL_ADDRESS"
                } else {
                    "CUDA_SUCCESS"
                },
                bytes: (!launch).then_some(4096 << (i % 6)),
                device_ptr: (!launch).then_some(0x7f00_0000_0000 + i as u64 * 0x1000),
                stream: Some(0x5000 + (i as u64 % 4) * 0x100),
                launch: launch.then_some(LaunchDims {
                    grid: [120 + (i % 7) as u32, 2, 1],
                    block: [256, 1, 1],
                    shared_mem_bytes: 1024 * (i % 3) as u32,
                    registers_only: false,
                }),
                workload: (i % 2 == 1).then_some(&pod),
                objects: CallObjects {
                    gpu: if one_gpu {
                        Some(&gpus[0])
                    } else {
                        (i % 11 != 0).then(|| &gpus[(i / 7) % 2])
                    },
                    ..Default::default()
                },
            },
            failed.then_some("incident-1"),
        );
    }
    builder.finish().unwrap()
}

#[test]
fn columns_are_encoded_as_chosen_and_read_back_exactly() {
    use parquet::basic::Encoding;
    let dir = tempfile::tempdir().unwrap();
    let mut files = PartitionedFiles::new(ParquetSinkConfig::with_path(dir.path()), "node-a");
    let batch = varied_cuda_batch(1000);
    assert_eq!(files.write(EventKind::Cuda, &batch).len(), 0);
    assert_eq!(files.close_all().len(), 1);
    let found = parquet_files(dir.path());
    let reader = SerializedFileReader::new(File::open(&found[0]).unwrap()).unwrap();
    let row_group = reader.metadata().row_group(0);
    let column = |name: &str| {
        row_group
            .columns()
            .iter()
            .find(|c| c.column_path().string() == name)
            .unwrap_or_else(|| panic!("no column {name}"))
    };
    let dictionary = |name: &str| {
        column(name)
            .encodings()
            .any(|e| e == Encoding::RLE_DICTIONARY)
    };
    let encoded = |name: &str, encoding| column(name).encodings().any(|e| e == encoding);
    // Times: delta-encoded, no dictionary.
    assert!(encoded("time", Encoding::DELTA_BINARY_PACKED) && !dictionary("time"));
    assert!(encoded("time_ns", Encoding::DELTA_BINARY_PACKED) && !dictionary("time_ns"));
    // Small integers plain, rarely-repeating 64-bit values without a dictionary.
    for name in [
        "pid",
        "tid",
        "result",
        "gpu_index",
        "grid_x",
        "shared_mem_bytes",
        "duration_ns",
        "device_ptr",
    ] {
        assert!(!dictionary(name), "{name} has a dictionary");
    }
    // Repeating strings and sizes keep theirs.
    for name in [
        "host",
        "boot_id",
        "comm",
        "function",
        "result_name",
        "bytes",
    ] {
        assert!(dictionary(name), "{name} has no dictionary");
    }
    // Statistics: none where they prune nothing, kept where readers prune on them.
    for name in [
        "comm",
        "function",
        "result_name",
        "kernel_name",
        "kernel_name_demangled",
        "gpu_uuid",
        "pci_bus_id",
    ] {
        assert!(column(name).statistics().is_none(), "{name} has statistics");
    }
    for name in ["host", "boot_id", "time", "result", "pid"] {
        assert!(
            column(name).statistics().is_some(),
            "{name} has no statistics"
        );
    }
    // Compression: none where zstd cannot shrink the column, zstd elsewhere (a list's leaves
    // by their full path).
    use parquet::basic::Compression;
    let compression = |name: &str| column(name).compression();
    for name in [
        "host",
        "boot_id",
        "time_ns",
        "incident_id",
        "gpu_uuid",
        "pci_bus_id",
        "held_memory.device_bytes",
        "held_memory.seen_from_start",
        "largest_allocations.list.item.address",
        "largest_allocations.list.item.time_ns",
    ] {
        assert_eq!(compression(name), Compression::UNCOMPRESSED, "{name}");
    }
    for name in [
        "time",
        "pid",
        "comm",
        "duration_ns",
        "kernel_name",
        "gpu_index",
    ] {
        assert!(
            matches!(compression(name), Compression::ZSTD(_)),
            "{name}: {:?}",
            compression(name)
        );
    }
    // And the values come back exactly.
    let back: Vec<arrow_array::RecordBatch> =
        ParquetRecordBatchReaderBuilder::try_new(File::open(&found[0]).unwrap())
            .unwrap()
            .build()
            .unwrap()
            .map(|b| b.unwrap())
            .collect();
    let back = arrow_select::concat::concat_batches(&back[0].schema(), &back).unwrap();
    assert_eq!(back.num_rows(), 1000);
    for (i, name) in batch.schema().fields().iter().enumerate() {
        assert_eq!(
            back.column(i).as_ref(),
            batch.column(i).as_ref(),
            "column {}",
            name.name()
        );
    }
}
