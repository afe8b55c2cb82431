//! What each column of the `cuda` table costs the Parquet thread in rows mode: the same rows
//! encoded into the sink's files (its file encoder and writer settings: zstd level 1, the
//! per-column encodings, its row groups) with every column, then each column alone in a file of its
//! own: its time and bytes per row. Two row shapes, each the way the
//! agent fills them: the load harness's allocations and frees (`bytes`, `device_ptr`, no
//! launch arguments) and a training loop's kernel launches (dimensions, kernel names); both
//! with the GPU on every row, as on a real node.
//!
//! `cargo bench --bench column_cost` prints the table (best of `COLUMN_COST_REPEATS`, default
//! 5, per variant; single thread, so nothing else on the VM is measured). Under `cargo test`
//! it runs a few rows once and checks the method (every column dropped once, none free in
//! bytes that holds values).

use std::sync::Arc;
use std::time::Instant;

use arrow_array::RecordBatch;
use gpuship_sinks::parquet::{file_encoder, ParquetSinkConfig};
use gpuship_sinks::schema::cuda::CallObjects;
use gpuship_sinks::schema::{CudaBatchBuilder, CudaRow, LaunchDims};
use gpuship_sinks::test_support::{host_identity, listed_gpu};
use gpuship_sinks::EventKind;

/// The agent's default batch size.
const BATCH_ROWS: usize = 8_192;

/// The rows of one shape, in batches of [`BATCH_ROWS`].
fn batches(rows: usize, launches: bool) -> Vec<RecordBatch> {
    let identity = host_identity("gpu-node-017", "0f3c1e9a-8d1b-4b7e-9a55-3c2d1e0f9a8b");
    let gpu = listed_gpu();
    let kernels = [
        "_ZN7cutlass6KernelINS_4gemm6kernel4GemmEEEvNT_6ParamsE",
        "_Z21elementwise_kernelILi128ELi4EEviT1_",
        "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEEEEviT0_T1_",
    ];
    let demangled = [
        "void cutlass::Kernel<cutlass::gemm::kernel::Gemm>(Gemm::Params)",
        "void elementwise_kernel<128, 4>(int, T1)",
        "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>(int, T0, T1)",
    ];
    let start = 1_795_320_000_000_000_000i64;
    let mut out = Vec::new();
    let mut builder = CudaBatchBuilder::new(identity, BATCH_ROWS);
    for n in 0..rows {
        let (function, bytes, device_ptr, launch, objects) = if launches {
            let k = n % kernels.len();
            (
                "cuLaunchKernel",
                None,
                None,
                Some(LaunchDims {
                    grid: [120 + (n % 7) as u32, 2, 1],
                    block: [256, 1, 1],
                    shared_mem_bytes: 1024,
                    registers_only: false,
                }),
                CallObjects {
                    handle: Some(0x5600_0000 + k as u64 * 0x40),
                    kernel_name: Some(kernels[k]),
                    kernel_name_demangled: Some(demangled[k]),
                    gpu: Some(&gpu),
                    ..Default::default()
                },
            )
        } else {
            let alloc = n % 2 == 0;
            (
                if alloc {
                    "cuMemAlloc_v2"
                } else {
                    "cuMemFree_v2"
                },
                alloc.then_some(4096u64 << (n % 6)),
                Some(0x7f00_0000_0000 + (n as u64 / 2 % 4096) * 0x10_0000),
                None,
                CallObjects {
                    gpu: Some(&gpu),
                    ..Default::default()
                },
            )
        };
        builder.append(&CudaRow {
            time_ns: start + n as i64 * 1_300,
            pid: 4242,
            tid: 4242 + (n % 2) as i32,
            comm: "cuda_workload",
            function,
            duration_ns: 900 + (n as u64 * 7_919) % 5_000,
            result: 0,
            result_name: "CUDA_SUCCESS",
            bytes,
            device_ptr,
            stream: launches.then_some(0x5000),
            launch,
            workload: None,
            objects,
        });
        if builder.len() == BATCH_ROWS {
            out.push(builder.finish().expect("batch"));
        }
    }
    if !builder.is_empty() {
        out.push(builder.finish().expect("batch"));
    }
    out
}

/// Encodes `batches` (projected to `columns`) into one in-memory file with the sink's
/// settings: (seconds, bytes).
fn encode(batches: &[RecordBatch], columns: &[usize]) -> (f64, usize) {
    let schema = Arc::new(batches[0].schema().project(columns).expect("projection"));
    let config = ParquetSinkConfig::with_path("/unused");
    let started = Instant::now();
    let mut writer = file_encoder(&config, EventKind::Cuda, schema).expect("the sink's encoder");
    for batch in batches {
        writer
            .write(&batch.project(columns).expect("projection"))
            .expect("write");
    }
    writer.finish().expect("close");
    let bytes = writer.inner().len();
    (started.elapsed().as_secs_f64(), bytes)
}

/// The best of `repeats` encodings.
fn best(batches: &[RecordBatch], columns: &[usize], repeats: usize) -> (f64, usize) {
    (0..repeats)
        .map(|_| encode(batches, columns))
        .min_by(|a, b| a.0.total_cmp(&b.0))
        .expect("at least one repeat")
}

/// Per column: (name, ns per row, bytes per row) for one shape, each column encoded alone
/// into a file of its own (dropping one column from the whole instead moves the total by
/// less than the run-to-run spread for most columns); and the whole, with every column.
fn column_costs(batches: &[RecordBatch], repeats: usize) -> (f64, f64, Vec<(String, f64, f64)>) {
    let rows = batches.iter().map(RecordBatch::num_rows).sum::<usize>() as f64;
    let schema = batches[0].schema();
    let all: Vec<usize> = (0..schema.fields().len()).collect();
    let (full_s, full_bytes) = best(batches, &all, repeats);
    let mut costs: Vec<(String, f64, f64)> = schema
        .fields()
        .iter()
        .enumerate()
        .map(|(index, field)| {
            let (seconds, bytes) = best(batches, &[index], repeats);
            (
                field.name().clone(),
                seconds * 1e9 / rows,
                bytes as f64 / rows,
            )
        })
        .collect();
    costs.sort_by(|a, b| b.1.total_cmp(&a.1));
    (full_s * 1e9 / rows, full_bytes as f64 / rows, costs)
}

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    let (rows, repeats) = if bench {
        let repeats = std::env::var("COLUMN_COST_REPEATS")
            .ok()
            .and_then(|r| r.parse().ok())
            .unwrap_or(5);
        (262_144, repeats)
    } else {
        (2 * BATCH_ROWS + 100, 1)
    };
    for (shape, launches) in [("allocations and frees", false), ("kernel launches", true)] {
        let input = batches(rows, launches);
        let (full_ns, full_bytes, costs) = column_costs(&input, repeats);
        assert_eq!(
            costs.len(),
            input[0].num_columns(),
            "every column dropped once"
        );
        // A column with a distinct value on most rows takes room in the file.
        let duration = costs
            .iter()
            .find(|c| c.0 == "duration_ns")
            .expect("duration_ns");
        assert!(
            duration.2 > 0.5,
            "duration_ns: {} bytes per row",
            duration.2
        );
        let alone_ns: f64 = costs.iter().map(|c| c.1).sum();
        println!(
            "\n{shape}: {rows} rows, {full_ns:.0} ns and {full_bytes:.2} bytes per row with every \
             column; the columns alone add up to {alone_ns:.0} ns"
        );
        println!("| column | ns per row | bytes per row |");
        println!("| --- | --- | --- |");
        for (name, ns, bytes) in &costs {
            println!("| {name} | {ns:.1} | {bytes:.2} |");
        }
    }
}
