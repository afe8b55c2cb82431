//! The fleet-lake benchmark (issue 18): a synthetic lake of `FLEET_HOSTS` hosts x 24 hours
//! written with the Parquet sink's own writer (its encodings, compression, row groups), then
//! `report --since 24h` over the whole fleet and over one host's lake, each timed with its peak
//! RSS (the child's `ru_maxrss` from `wait4`). Figures: docs/performance.md.
//!
//! ```sh
//! cargo bench --bench fleet_lake            # 1,000 hosts, lake under target/fleet-lake
//! FLEET_HOSTS=100 FLEET_BIN=target/release/gpuship-lake cargo bench --bench fleet_lake
//! # what the agents write (12 files per kind and host-hour, five kinds), then compacted:
//! FLEET_AGENT_FILES=1 FLEET_COMPACT=1 FLEET_HOSTS=50 cargo bench --bench fleet_lake
//! ```
//!
//! Sizes per host and hour (justified in docs/performance.md): `cuda` `FLEET_CUDA_ROWS` calls
//! (default 5,000), `driver` `FLEET_DRIVER_ROWS` operations (default 1,000), `xid` one XID
//! row. By default each kind's hour is one file and the kinds are `cuda`, `driver` and `xid`.
//! `FLEET_AGENT_FILES=1` writes what an agent on its defaults writes instead: every kind's hour
//! in 12 files (one per `max_file_age_secs`, 300 s), the XID in a file of its own, and the
//! `cuda_stats` (8 processes x 5 functions every 10 s) and `cuda_memory` (8 processes every
//! 10 s) kinds too. `FLEET_COMPACT=1` then runs `compact` over the fleet (`FLEET_LAKE_BIN`, by
//! default the `gpuship-lake` beside `FLEET_BIN`) and the report again, with `--iceberg` as
//! well, and a `query` before and after, each with wall time and peak RSS.
//! `FLEET_KEEP=1` keeps the lake; otherwise it is deleted at the end. `FLEET_ONLY_WRITE=1`
//! writes the lake and stops (to upload it elsewhere, e.g. moto's S3).
//! Without `--bench` (as `cargo test --all-targets` runs it) the defaults are 2 hosts of 200
//! CUDA and 50 driver rows per hour, the agents' file counts and a compaction: a smoke test
//! that the report, the query and the compaction run over such a lake.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use gpuship_sinks::parquet::{FileOutcome, ParquetSinkConfig, PartitionedFiles};
use gpuship_sinks::schema::{
    CallGpu, CudaBatchBuilder, CudaMemoryBatchBuilder, CudaMemoryRow, CudaRow,
    CudaStatsBatchBuilder, CudaStatsRow, DriverBatchBuilder, DriverRow, DurationBucket,
    DurationStats, HostIdentity, XidBatchBuilder, XidRecord, XidSource,
};
use gpuship_sinks::EventKind;

const HOUR_NS: i64 = 3_600_000_000_000;

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

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

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

struct Sizes {
    cuda_rows: usize,
    driver_rows: usize,
    /// Files per kind and hour (the XID's hour is one file).
    files_per_hour: usize,
    /// `cuda_stats` and `cuda_memory` as well.
    five_kinds: bool,
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

/// One host's 24 hours, ending at `end_ns` (an hour boundary), into `root`.
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
    for hour in 0..24 {
        let start = end_ns - (24 - hour) * HOUR_NS;
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
fn write_lake(root: &Path, hosts: usize, first: usize, end_ns: i64, sizes: &Sizes) -> u64 {
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

/// Runs `bin args` and returns (seconds, peak RSS in KiB, stdout, stderr); panics when it
/// fails.
// The child is reaped by `wait4`, which also gives its peak RSS; `Child::wait` cannot.
#[allow(clippy::zombie_processes)]
fn timed(bin: &Path, args: &[&str]) -> (f64, i64, String, String) {
    use std::io::Read;
    let started = Instant::now();
    let mut child = Command::new(bin)
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|err| panic!("{} runs: {err}", bin.display()));
    // Small outputs (a report goes to /dev/null): read after the exit without a deadlock.
    let (mut stdout, mut stderr) = (String::new(), String::new());
    let out_pipe = child.stdout.take();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        if let Some(mut pipe) = out_pipe {
            let _ = pipe.read_to_string(&mut text);
        }
        text
    });
    if let Some(mut pipe) = child.stderr.take() {
        let _ = pipe.read_to_string(&mut stderr);
    }
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value for wait4 to overwrite.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: wait4 on our own child, with pointers to locals it fills.
    let waited = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    let seconds = started.elapsed().as_secs_f64();
    assert_eq!(waited, pid, "wait4");
    stdout.push_str(&reader.join().expect("the stdout reader"));
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "{} {args:?} failed: {stderr}",
        bin.display()
    );
    (seconds, usage.ru_maxrss, stdout, stderr)
}

/// What one timed command printed for the benchmark.
fn say(what: &str, (seconds, rss_kib, _, stderr): &(f64, i64, String, String)) {
    println!(
        "fleet_lake: {what}: {seconds:.2} s, peak RSS {:.1} MiB\n  {}",
        *rss_kib as f64 / 1024.0,
        stderr.lines().last().unwrap_or_default()
    );
}

/// The query whose answer must be the same before and after compaction: rows and a sum of
/// each kind.
const CHECK_SQL: &str = "select 'cuda', count(*), sum(duration_ns) from cuda \
     union all select 'driver', count(*), sum(duration_ns) from driver \
     union all select 'xid', count(*), sum(code) from xid \
     union all select 'cuda_stats', count(*), sum(calls) from cuda_stats \
     union all select 'cuda_memory', count(*), sum(allocations) from cuda_memory \
     order by 1";

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    // `cargo bench` passes `--bench`; `cargo test --all-targets` (the suite) runs this once
    // without it, as a smoke test on a lake of two small hosts.
    let full = std::env::args().any(|a| a == "--bench");
    let flag = |name: &str| std::env::var_os(name).is_some_and(|v| v != "0");
    let agent_files = flag("FLEET_AGENT_FILES") || !full;
    let hosts = env_usize("FLEET_HOSTS", if full { 1_000 } else { 2 });
    let sizes = Sizes {
        cuda_rows: env_usize("FLEET_CUDA_ROWS", if full { 5_000 } else { 200 }),
        driver_rows: env_usize("FLEET_DRIVER_ROWS", if full { 1_000 } else { 50 }),
        files_per_hour: if agent_files { 12 } else { 1 },
        five_kinds: agent_files,
    };
    let bin = std::env::var_os("FLEET_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_gpuship")));
    let lake_bin = std::env::var_os("FLEET_LAKE_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| bin.with_file_name("gpuship-lake"));
    let root = std::env::var_os("FLEET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("fleet-lake"));
    let fleet = root.join("fleet");
    let one = root.join("one-host");
    let _ = std::fs::remove_dir_all(&root);
    let now = chrono::Utc::now().timestamp_nanos_opt().expect("now");
    let end_ns = now - now.rem_euclid(HOUR_NS);
    let rfc3339 = |ns: i64| {
        chrono::DateTime::from_timestamp_nanos(ns)
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    };
    let (since, until) = (rfc3339(end_ns - 24 * HOUR_NS), rfc3339(end_ns));

    let started = Instant::now();
    let bytes = write_lake(&fleet, hosts, 0, end_ns, &sizes);
    let one_bytes = write_lake(&one, 1, hosts, end_ns, &sizes);
    let files = walk(&fleet);
    let kinds = if sizes.five_kinds { 5 } else { 3 };
    println!(
        "fleet_lake: wrote {hosts} hosts x 24 h x {kinds} kinds, {} files per kind-hour: {files} files, {:.2} GB ({:.1} KB per file) in {:.1} s; one host {:.1} MB",
        sizes.files_per_hour,
        bytes as f64 / 1e9,
        bytes as f64 / files.max(1) as f64 / 1e3,
        started.elapsed().as_secs_f64(),
        one_bytes as f64 / 1e6
    );
    if flag("FLEET_ONLY_WRITE") {
        return;
    }
    let fleet_data = fleet.display().to_string();
    let range = ["--since", since.as_str(), "--until", until.as_str()];
    let report_args = |data: &str, iceberg: bool| {
        let mut args = vec!["report", "--data", data, "-o", "/dev/null"];
        args.extend(range);
        if iceberg {
            args.push("--iceberg");
        }
        args.into_iter().map(String::from).collect::<Vec<_>>()
    };
    let run = |program: &Path, args: &[String]| {
        timed(
            program,
            &args.iter().map(String::as_str).collect::<Vec<_>>(),
        )
    };
    for (name, lake) in [("one host", &one), ("fleet", &fleet)] {
        let data = lake.display().to_string();
        say(
            &format!("report, {name}"),
            &run(&bin, &report_args(&data, false)),
        );
    }
    if full && !flag("FLEET_COMPACT") {
        if !flag("FLEET_KEEP") {
            let _ = std::fs::remove_dir_all(&root);
        }
        return;
    }
    let query_args = |iceberg: bool| {
        let mut args = vec!["query", "--data", fleet_data.as_str(), "--format", "csv"];
        args.extend(range);
        if iceberg {
            args.push("--iceberg");
        }
        args.push(CHECK_SQL);
        args.into_iter().map(String::from).collect::<Vec<_>>()
    };
    let before = run(&bin, &query_args(false));
    say("query, fleet", &before);
    let compacted = timed(
        &lake_bin,
        &[
            "compact",
            "--data",
            &fleet_data,
            "--grace",
            "0s",
            "--retire-after",
            "0s",
        ],
    );
    say("compact, fleet", &compacted);
    println!("  {}", compacted.2.trim().replace('\n', "\n  "));
    let left = walk(&fleet);
    println!(
        "fleet_lake: objects after compaction: {left} ({:.0}x fewer)",
        files as f64 / left.max(1) as f64
    );
    say(
        "report, compacted fleet",
        &run(&bin, &report_args(&fleet_data, false)),
    );
    say(
        "report, compacted fleet, --iceberg",
        &run(&bin, &report_args(&fleet_data, true)),
    );
    for iceberg in [false, true] {
        let after = run(&bin, &query_args(iceberg));
        say(
            &format!(
                "query, compacted fleet{}",
                if iceberg { ", --iceberg" } else { "" }
            ),
            &after,
        );
        assert_eq!(after.2, before.2, "the same rows after compaction");
    }
    println!("  {}", before.2.trim().replace('\n', "\n  "));
    if !flag("FLEET_KEEP") {
        let _ = std::fs::remove_dir_all(&root);
    }
}

/// Files below `dir`.
fn walk(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                walk(&e.path())
            } else {
                1
            }
        })
        .sum()
}
