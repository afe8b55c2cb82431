//! Parquet writing with zstd: record batches -> finalized files (encode, compress, write,
//! fsync, rename). Target: >= 1 M rows/s on one core.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use gpuship_sinks::parquet::{FileOutcome, ParquetSinkConfig, PartitionedFiles};

/// The settings the README's figure was measured with: zstd level 3, one file of 524,288 rows
/// (the sink's defaults are lighter: level 1, files of at most 4 MiB).
fn measured_config(root: &std::path::Path) -> ParquetSinkConfig {
    let mut config = ParquetSinkConfig::with_path(root);
    config.zstd_level = 3;
    config.row_group_bytes = 32 << 20;
    config.max_file_bytes = 1 << 30;
    config
}
use gpuship_sinks::schema::{CudaBatchBuilder, CudaRow, LaunchDims};
use gpuship_sinks::test_support::host_identity;
use gpuship_sinks::EventKind;

const ROWS_PER_BATCH: usize = 65_536;
const BATCHES: usize = 8;

fn batches() -> Vec<arrow_array::RecordBatch> {
    let identity = host_identity("gpu-node-017", "0f3c1e9a-8d1b-4b7e-9a55-3c2d1e0f9a8b");
    let functions = [
        "cuLaunchKernel",
        "cuLaunchKernelEx",
        "cuMemAlloc_v2",
        "cuMemcpyHtoDAsync_v2",
    ];
    let start = 1_795_320_000_000_000_000i64;
    (0..BATCHES)
        .map(|b| {
            let mut builder = CudaBatchBuilder::new(identity.clone(), ROWS_PER_BATCH);
            for i in 0..ROWS_PER_BATCH {
                let n = b * ROWS_PER_BATCH + i;
                let launch = !n.is_multiple_of(3);
                builder.append(&CudaRow {
                    time_ns: start + n as i64 * 1_300,
                    pid: 4242,
                    tid: 4242 + (n % 8) as i32,
                    comm: "pt_main_thread",
                    function: functions[n % 4],
                    duration_ns: 1_800 + (n as u64 * 7_919) % 50_000,
                    result: if n.is_multiple_of(1000) { 700 } else { 0 },
                    result_name: if n.is_multiple_of(1000) {
                        "CUDA_ERROR_ILLEGAL_ADDRESS"
                    } else {
                        "CUDA_SUCCESS"
                    },
                    bytes: (!launch).then_some(4096 << (n % 6)),
                    device_ptr: (!launch)
                        .then_some(0x7f00_0000_0000 + (n as u64 % 4096) * 0x10_0000),
                    stream: Some(0x5000 + (n as u64 % 4) * 0x100),
                    launch: launch.then_some(LaunchDims {
                        grid: [120, 2, 1],
                        block: [256, 1, 1],
                        shared_mem_bytes: 1024,
                        registers_only: false,
                    }),
                    workload: None,
                    objects: Default::default(),
                });
            }
            builder.finish().expect("batch")
        })
        .collect()
}

fn write_parquet(c: &mut Criterion) {
    let input = batches();
    let mut group = c.benchmark_group("parquet_write");
    group.throughput(Throughput::Elements((ROWS_PER_BATCH * BATCHES) as u64));
    group.sample_size(10);
    group.bench_function("cuda_zstd3_524288_rows", |b| {
        b.iter_batched(
            || tempfile::tempdir().expect("tempdir"),
            |dir| {
                let mut files = PartitionedFiles::new(measured_config(dir.path()), "gpu-node-017");
                let mut outcomes = Vec::new();
                for batch in &input {
                    outcomes.extend(files.write(EventKind::Cuda, batch));
                }
                outcomes.extend(files.close_all());
                let rows: u64 = outcomes
                    .iter()
                    .map(|o| match o {
                        FileOutcome::Finalized { rows, .. } => *rows,
                        FileOutcome::Rejected { error, .. } | FileOutcome::Failed { error, .. } => {
                            panic!("{error}")
                        }
                    })
                    .sum();
                assert_eq!(rows as usize, ROWS_PER_BATCH * BATCHES);
                dir
            },
            BatchSize::PerIteration,
        )
    });
    group.finish();
}

criterion_group!(benches, write_parquet);
criterion_main!(benches);
