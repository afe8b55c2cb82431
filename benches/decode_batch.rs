//! Raw ring records -> Arrow RecordBatch: the consumer's per-event hot path (record check,
//! decode, function-name lookup, wall-clock conversion, append to the Arrow builders, batch
//! finish). Target: >= 3 M events/s on one core. `consumer_counting`: the per-call tallies the
//! consumer keeps beside that (run summary, live view).

use std::time::Instant;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use gpuship::bpf::cuda::types::{cuda_event, gpuship_arg_valid, gpuship_record_kind};
use gpuship::config::BatchConfig;
use gpuship::decode::{c_chars, record_bytes};
use gpuship::enrich::Clocks;
use gpuship::live::{LivePublisher, LiveTap};
use gpuship::sources::cuda::batcher::CudaBatcher;
use gpuship::sources::cuda::decode::{self, Decoder};
use gpuship::sources::cuda::plan::FunctionTable;
use gpuship::summary::CallTally;
use gpuship_sinks::test_support::{host_identity, listed_gpu};

const EVENTS: usize = 65_536;

fn records() -> Vec<Vec<u8>> {
    let mut comm = [0i8; 16];
    for (dst, src) in comm.iter_mut().zip(b"pt_main_thread") {
        *dst = *src as i8;
    }
    (0..EVENTS)
        .map(|i| {
            let launch = !i.is_multiple_of(3);
            let event = cuda_event {
                record_kind: gpuship_record_kind::GPUSHIP_RECORD_CUDA.0,
                function_id: (i % 4) as u32,
                start_boot_ns: 1_000_000 + i as u64 * 700,
                duration_ns: 2_000 + (i % 17) as u64,
                pid: 4242,
                tid: 4242 + (i % 8) as u32,
                result: if i.is_multiple_of(1000) { 700 } else { 0 },
                valid: if launch {
                    gpuship_arg_valid::GPUSHIP_ARG_LAUNCH.0
                        | gpuship_arg_valid::GPUSHIP_ARG_STREAM.0
                } else {
                    gpuship_arg_valid::GPUSHIP_ARG_BYTES.0
                        | gpuship_arg_valid::GPUSHIP_ARG_DEVICE_PTR.0
                },
                bytes: 4096,
                device_ptr: 0x7f00_0000_0000 + i as u64,
                stream: 0x5000,
                grid: [120, 2, 1],
                block: [256, 1, 1],
                shared_mem_bytes: 1024,
                comm,
                ..Default::default()
            };
            record_bytes(&event)
        })
        .collect()
}

/// A decoder knowing the four functions the records name, on a fixed clock.
fn decoder() -> Decoder {
    Decoder::new(
        Clocks::fixed(1_700_000_000_000_000_000, 0),
        FunctionTable::from_names([
            "cuLaunchKernel",
            "cuLaunchKernelEx",
            "cuMemAlloc_v2",
            "cuMemcpyHtoDAsync_v2",
        ]),
    )
}

fn decode_to_batches(c: &mut Criterion) {
    // The agent's heap settings (it fixes them at start): without them every batch's larger
    // columns are mapped, faulted in and unmapped, which the agent never pays.
    gpuship::heap::fix_large_block_thresholds();
    let raw = records();
    let decoder = decoder();
    let identity = host_identity("gpu-node-017", "0f3c1e9a-8d1b-4b7e-9a55-3c2d1e0f9a8b");
    let config = BatchConfig {
        max_events: 65_536,
        max_bytes: 64 << 20,
        timeout_ms: 1_000,
    };
    let mut group = c.benchmark_group("ring_records_to_record_batch");
    group.throughput(Throughput::Elements(EVENTS as u64));
    // On a GPU node every row names its GPU (the node's one, here): `gpu_uuid`, `pci_bus_id`
    // and `gpu_index` filled; on a node without one they are null.
    let gpu = listed_gpu();
    for (name, gpu) in [
        ("cuda_65536_events", None),
        ("cuda_65536_events_with_gpu", Some(&gpu)),
    ] {
        group.bench_function(name, |b| {
            b.iter_batched_ref(
                || CudaBatcher::new(identity.clone(), &config),
                |batcher| {
                    let mut rows = 0;
                    for record in &raw {
                        let event = decode::cuda_event(record).expect("valid record");
                        let comm = c_chars(&event.comm);
                        let mut row = decoder.cuda_row(&event, &comm).expect("known function");
                        row.objects.gpu = gpu;
                        if let Some(batch) = batcher.push(&row) {
                            rows += batch.len();
                        }
                    }
                    rows += batcher.flush().map_or(0, |b| b.len());
                    assert_eq!(rows, EVENTS);
                },
                BatchSize::LargeInput,
            )
        });
    }
    group.finish();
}

/// The consumer's per-call counting on top of decoding: the run summary's and the live view's
/// tallies (`gpuship top`), with the publication they trigger every 1,024 calls.
fn count_calls(c: &mut Criterion) {
    let raw = records();
    let decoder = decoder();
    let events: Vec<_> = raw
        .iter()
        .map(|r| decode::cuda_event(r).expect("valid record"))
        .collect();
    let comm = c_chars(&events[0].comm).into_owned();
    let rows: Vec<_> = events
        .iter()
        .map(|e| decoder.cuda_row(e, &comm).expect("known function"))
        .collect();
    let mut group = c.benchmark_group("consumer_counting");
    group.throughput(Throughput::Elements(EVENTS as u64));
    group.bench_function("call_tally_65536_events", |b| {
        let mut tally = CallTally::default();
        b.iter(|| {
            for (event, row) in events.iter().zip(&rows) {
                tally.record(event.function_id, row);
            }
        })
    });
    group.bench_function("call_tally_and_live_65536_events", |b| {
        let mut tally = CallTally::default();
        let tap = LiveTap::new();
        let mut live = LivePublisher::new(FunctionTable::from_names(["a", "b", "c", "d"]));
        b.iter(|| {
            for (event, row) in events.iter().zip(&rows) {
                tally.record(event.function_id, row);
                if live.record(row.pid, &event.comm, row.result != 0) {
                    live.publish(&tally, &tap, Instant::now(), false);
                }
            }
        })
    });
    group.finish();
}

criterion_group!(benches, decode_to_batches, count_calls);
criterion_main!(benches);
