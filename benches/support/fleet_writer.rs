//! The fleet-lake benchmark's writer: one host's hours (24 by default) of every kind, written with the
//! Parquet sink's own writer (`PartitionedFiles`), as one file per kind and hour or as the
//! agents write them (see `benches/fleet_lake.rs`).

use std::path::Path;
use std::sync::Arc;

use gpuship_sinks::parquet::{FileOutcome, ParquetSinkConfig, PartitionedFiles};
use gpuship_sinks::schema::{
    CallGpu, CudaBatchBuilder, CudaMemoryBatchBuilder, CudaMemoryRow, CudaRow,
    CudaStatsBatchBuilder, CudaStatsRow, DriverBatchBuilder, DriverRow, DurationBucket,
    DurationStats, HostIdentity, XidBatchBuilder, XidRecord, XidSource,
};
use gpuship_sinks::EventKind;

pub const HOUR_NS: i64 = 3_600_000_000_000;

/// The functions a default-configured agent records, most frequent first.
const FUNCTIONS: [&str; 12] = [
    "cuMemcpyHtoDAsync_v2",
    "cuMemcpyDtoHAsync_v2",
    "cuStreamSynchronize",
    "cuMemAlloc_v2",
    "cuMemFree_v2",
    "cuEventRecord",
    "cuEventSynchronize",
    "cuCtxSynchronize",
    "cuMemAllocHost_v2",
    "cuMemsetD8Async",
    "cuModuleLoadData",
    "cuInit",
];

/// A small deterministic generator (xorshift), so runs write the same lake.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn identity(host: &str) -> HostIdentity {
    HostIdentity {
        host: host.into(),
        boot_id: "00000000-0000-0000-0000-000000000000".into(),
    }
}

/// What each host writes per hour.
pub struct Sizes {
    /// `cuda` rows.
    pub cuda_rows: usize,
    /// `driver` rows.
    pub driver_rows: usize,
    /// Files per kind and hour (the XID's hour is one file).
    pub files_per_hour: usize,
    /// `cuda_stats` and `cuda_memory` as well.
    pub five_kinds: bool,
    /// Hours written, ending at the last hour boundary (24 for a day).
    pub hours: i64,
}

/// A statistics interval (the default `stats_interval_secs`).
const STATS_INTERVAL_NS: i64 = 10_000_000_000;
/// The processes of a host, and the functions each has in `cuda_stats` every interval.
const PROCESSES: i32 = 8;
const STATS_FUNCTIONS: [&str; 5] = [
    "cuLaunchKernel",
    "cuMemcpyAsync",
    "cuMemcpyDtoDAsync_v2",
    "cuEventRecord",
    "cuStreamWaitEvent",
];

/// The `cuda_stats` rows of the intervals ending in `[from, to)`.
fn stats_rows(rng: &mut Rng, host: &str, from: i64, to: i64) -> CudaStatsBatchBuilder {
    let mut rows = CudaStatsBatchBuilder::new(identity(host));
    let first = from.div_euclid(STATS_INTERVAL_NS) + 1;
    let mut end = first * STATS_INTERVAL_NS;
    while end < to {
        for pid in 0..PROCESSES {
            for function in STATS_FUNCTIONS {
                let calls = 1_000 + rng.below(20_000);
                let timed = function != "cuLaunchKernel";
                rows.append(CudaStatsRow {
                    time_ns: end,
                    interval_ns: STATS_INTERVAL_NS as u64,
                    pid: 1_000 + pid,
                    comm: "python3".into(),
                    function: function.into(),
                    result: 0,
                    result_name: "CUDA_SUCCESS".into(),
                    calls,
                    bytes_sum: function.starts_with("cuMemcpy").then_some(calls << 20),
                    durations: timed.then(|| DurationStats {
                        sum_ns: calls * 3_000,
                        min_ns: 1_000,
                        max_ns: 40_000 + rng.below(100_000),
                        p50_ns: 2_048,
                        p99_ns: 16_384,
                        buckets: vec![
                            DurationBucket {
                                from_ns: 1_024,
                                to_ns: 2_048,
                                calls: calls / 2,
                            },
                            DurationBucket {
                                from_ns: 2_048,
                                to_ns: 65_536,
                                calls: calls - calls / 2 - 1,
                            },
                            DurationBucket {
                                from_ns: 65_536,
                                to_ns: 131_072,
                                calls: 1,
                            },
                        ],
                    }),
                    workload: None,
                    observed_fraction: 1.0,
                });
            }
        }
        end += STATS_INTERVAL_NS;
    }
    rows
}

/// The `cuda_memory` rows of the intervals ending in `[from, to)`: each process on its GPU.
fn memory_rows(
    rng: &mut Rng,
    host: &str,
    from: i64,
    to: i64,
    gpus: &[Arc<CallGpu>],
) -> CudaMemoryBatchBuilder {
    let mut rows = CudaMemoryBatchBuilder::new(identity(host));
    let first = from.div_euclid(STATS_INTERVAL_NS) + 1;
    let mut end = first * STATS_INTERVAL_NS;
    while end < to {
        for pid in 0..PROCESSES {
            rows.append(CudaMemoryRow {
                time_ns: end,
                pid: 1_000 + pid,
                comm: "python3".into(),
                gpu: Some(Arc::clone(&gpus[pid as usize % gpus.len()])),
                bytes: [60 << 30 | rng.below(1 << 30), 1 << 28, 0, 0, 0],
                allocations: 2_000 + rng.below(100),
                seen_from_start: true,
                workload: None,
            });
        }
        end += STATS_INTERVAL_NS;
    }
    rows
}

/// One host's `sizes.hours` hours, ending at `end_ns` (an hour boundary), into `root`.
fn write_host(root: &Path, host_index: usize, end_ns: i64, sizes: &Sizes) -> u64 {
    let host = format!("gpu-node-{host_index:04}");
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (host_index as u64 + 1));
    let mut files = PartitionedFiles::new(ParquetSinkConfig::with_path(root), &host);
    let gpus: Vec<Arc<CallGpu>> = (0..8)
        .map(|i| {
            Arc::new(CallGpu {
                uuid: format!("GPU-{host_index:08x}-0000-0000-0000-{i:012x}"),
                pci_bus_id: Some(format!("0000:{:02x}:00.0", 0x10 * (i + 1))),
                index: Some(i),
            })
        })
        .collect();
    let mut bytes = 0u64;
    let mut close = |files: &mut PartitionedFiles| {
        for outcome in files.close_all() {
            let FileOutcome::Finalized { location, .. } = outcome else {
                panic!("a file was not written: {outcome:?}");
            };
            bytes += std::fs::metadata(location).map_or(0, |m| m.len());
        }
    };
    let slices = sizes.files_per_hour.max(1);
    for hour in 0..sizes.hours {
        let start = end_ns - (sizes.hours - hour) * HOUR_NS;
        for slice in 0..slices {
            // The rows of this slice of the hour: one file per kind, as an agent finalises
            // them every max_file_age_secs.
            let part = |rows: usize| (rows * slice / slices)..(rows * (slice + 1) / slices);
            let (from, to) = (
                start + HOUR_NS * slice as i64 / slices as i64,
                start + HOUR_NS * (slice as i64 + 1) / slices as i64,
            );
            let cuda_part = part(sizes.cuda_rows);
            let mut cuda = CudaBatchBuilder::new(identity(&host), cuda_part.len());
            for i in cuda_part {
                // Skewed toward the first (copies and syncs), as a training loop's calls are.
                let n = FUNCTIONS.len() as u64;
                let (a, b) = (rng.below(n), rng.below(n));
                let function = FUNCTIONS[(a * b / n) as usize];
                let failed = rng.below(2_000) == 0;
                cuda.append(&CudaRow {
                    time_ns: start + (i as i64) * (HOUR_NS / sizes.cuda_rows as i64),
                    pid: 1_000 + rng.below(8) as i32,
                    tid: 2_000 + rng.below(64) as i32,
                    comm: "python3",
                    function,
                    duration_ns: {
                        let magnitude = 8 + rng.below(14);
                        500 + rng.below(1 << magnitude)
                    },
                    result: if failed { 700 } else { 0 },
                    result_name: if failed {
                        "CUDA_ERROR_ILLEGAL_ADDRESS"
                    } else {
                        "CUDA_SUCCESS"
                    },
                    bytes: function.starts_with("cuMem").then(|| 1 << rng.below(30)),
                    device_ptr: Some(0x7f00_0000_0000 + rng.below(1 << 32)),
                    stream: Some(rng.below(4)),
                    launch: None,
                    workload: None,
                    objects: Default::default(),
                });
            }
            files.write(EventKind::Cuda, &cuda.finish().expect("a cuda batch"));
            let mut driver = DriverBatchBuilder::new(identity(&host));
            for i in part(sizes.driver_rows) {
                driver.append(DriverRow {
                    time_ns: start + (i as i64) * (HOUR_NS / sizes.driver_rows as i64),
                    pid: 1_000 + rng.below(8) as i32,
                    tid: 2_000 + rng.below(64) as i32,
                    comm: "python3".into(),
                    hook: "ioctl".into(),
                    device: Some("nvidia0".into()),
                    major: Some(195),
                    minor: Some(0),
                    fd: Some(3 + rng.below(8) as i32),
                    request: Some(0xc020_462a),
                    request_dir: Some("read_write"),
                    request_type: Some(0x46),
                    request_nr: Some(0x2a),
                    request_size: Some(32),
                    request_name: Some("NV_ESC_RM_CONTROL"),
                    duration_ns: 2_000 + rng.below(50_000),
                    result: Some(0),
                    workload: None,
                });
            }
            files.write(EventKind::Driver, &driver.finish().expect("a driver batch"));
            if sizes.five_kinds {
                let mut stats = stats_rows(&mut rng, &host, from, to);
                files.write(
                    EventKind::CudaStats,
                    &stats.finish().expect("a stats batch"),
                );
                let mut memory = memory_rows(&mut rng, &host, from, to, &gpus);
                files.write(
                    EventKind::CudaMemory,
                    &memory.finish().expect("a memory batch"),
                );
            }
            close(&mut files);
        }
        // The hour's XID: a file of its own, finalised within a second.
        let mut xid = XidBatchBuilder::new(identity(&host));
        xid.append(&XidRecord {
            time_ns: start + rng.below(HOUR_NS as u64) as i64,
            code: [13, 31, 43, 63, 79, 94][rng.below(6) as usize],
            pci_bus_id: format!("0000:{:02x}:00.0", 0x10 * (1 + rng.below(8))),
            message: "Graphics SM Warp Exception on (GPC 1, TPC 0, SM 0)".into(),
            pid: Some(1_000 + rng.below(8) as i32),
            ..XidRecord::new(XidSource::Kmsg)
        });
        files.write(EventKind::Xid, &xid.finish().expect("an xid batch"));
        close(&mut files);
    }
    bytes
}

/// Writes `hosts` hosts with two threads; returns bytes written.
pub fn write_lake(root: &Path, hosts: usize, first: usize, end_ns: i64, sizes: &Sizes) -> u64 {
    let threads = 2;
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                scope.spawn(move || {
                    (first..first + hosts)
                        .filter(|h| h % threads == t)
                        .map(|h| write_host(root, h, end_ns, sizes))
                        .sum::<u64>()
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("a writer thread"))
            .sum()
    })
}
