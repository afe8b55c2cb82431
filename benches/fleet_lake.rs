//! The fleet-lake benchmark (issue 18): a synthetic lake of `FLEET_HOSTS` hosts x 24 hours x
//! 3 kinds written with the Parquet sink's own writer (its encodings, compression, row groups),
//! then `report --since 24h` over the whole fleet and over one host's lake, each timed with
//! its peak RSS (the child's `ru_maxrss` from `wait4`). Figures: docs/performance.md.
//!
//! ```sh
//! cargo bench --bench fleet_lake            # 1,000 hosts, lake under target/fleet-lake
//! FLEET_HOSTS=100 FLEET_BIN=target/release/gpuship-lake cargo bench --bench fleet_lake
//! ```
//!
//! Sizes per host and hour (justified in docs/performance.md): `cuda` `FLEET_CUDA_ROWS` calls
//! (default 5,000), `driver` `FLEET_DRIVER_ROWS` operations (default 1,000), `xid` one XID
//! row. `FLEET_KEEP=1` keeps the lake; otherwise it is deleted at the end. `FLEET_ONLY_WRITE=1`
//! writes the lake and stops (to upload it elsewhere, e.g. moto's S3).
//! Without `--bench` (as `cargo test --all-targets` runs it) the defaults are 2 hosts of 200
//! CUDA and 50 driver rows per hour: a smoke test that the report runs over such a lake.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use gpuship_sinks::parquet::{FileOutcome, ParquetSinkConfig, PartitionedFiles};
use gpuship_sinks::schema::{
    CudaBatchBuilder, CudaRow, DriverBatchBuilder, DriverRow, HostIdentity, XidBatchBuilder,
    XidRecord, XidSource,
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
}

/// One host's 24 hours, ending at `end_ns` (an hour boundary), into `root`.
fn write_host(root: &Path, host_index: usize, end_ns: i64, sizes: &Sizes) -> u64 {
    let host = format!("gpu-node-{host_index:04}");
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (host_index as u64 + 1));
    let mut files = PartitionedFiles::new(ParquetSinkConfig::with_path(root), &host);
    let mut bytes = 0u64;
    for hour in 0..24 {
        let start = end_ns - (24 - hour) * HOUR_NS;
        let mut cuda = CudaBatchBuilder::new(identity(&host), sizes.cuda_rows);
        for i in 0..sizes.cuda_rows {
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
        for i in 0..sizes.driver_rows {
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
        for outcome in files.close_all() {
            let FileOutcome::Finalized { location, .. } = outcome else {
                panic!("a file was not written: {outcome:?}");
            };
            bytes += std::fs::metadata(location).map_or(0, |m| m.len());
        }
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

/// Runs `bin report --since 24h --data lake` and returns (seconds, peak RSS in KiB, stderr).
// The child is reaped by `wait4`, which also gives its peak RSS; `Child::wait` cannot.
#[allow(clippy::zombie_processes)]
fn report(bin: &Path, lake: &str) -> (f64, i64, String) {
    let started = Instant::now();
    let child = Command::new(bin)
        .args([
            "report",
            "--since",
            "24h",
            "--data",
            lake,
            "-o",
            "/dev/null",
        ])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the report runs");
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value for wait4 to overwrite.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: wait4 on our own child, with pointers to locals it fills.
    let waited = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    let seconds = started.elapsed().as_secs_f64();
    assert_eq!(waited, pid, "wait4");
    let mut stderr = String::new();
    if let Some(mut pipe) = child.stderr {
        use std::io::Read;
        let _ = pipe.read_to_string(&mut stderr);
    }
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "report failed: {stderr}"
    );
    (seconds, usage.ru_maxrss, stderr)
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    // `cargo bench` passes `--bench`; `cargo test --all-targets` (the suite) runs this once
    // without it, as a smoke test on a lake of two small hosts.
    let full = std::env::args().any(|a| a == "--bench");
    let hosts = env_usize("FLEET_HOSTS", if full { 1_000 } else { 2 });
    let sizes = Sizes {
        cuda_rows: env_usize("FLEET_CUDA_ROWS", if full { 5_000 } else { 200 }),
        driver_rows: env_usize("FLEET_DRIVER_ROWS", if full { 1_000 } else { 50 }),
    };
    let bin = std::env::var_os("FLEET_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_gpuship")));
    let root = std::env::var_os("FLEET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("fleet-lake"));
    let fleet = root.join("fleet");
    let one = root.join("one-host");
    let _ = std::fs::remove_dir_all(&root);
    let now = chrono::Utc::now().timestamp_nanos_opt().expect("now");
    let end_ns = now - now.rem_euclid(HOUR_NS);

    let started = Instant::now();
    let bytes = write_lake(&fleet, hosts, 0, end_ns, &sizes);
    let one_bytes = write_lake(&one, 1, hosts, end_ns, &sizes);
    let files = walk(&fleet);
    println!(
        "fleet_lake: wrote {hosts} hosts x 24 h x 3 kinds: {files} files, {:.2} GB ({:.1} KB per file) in {:.1} s; one host {:.1} MB",
        bytes as f64 / 1e9,
        bytes as f64 / files.max(1) as f64 / 1e3,
        started.elapsed().as_secs_f64(),
        one_bytes as f64 / 1e6
    );
    if std::env::var_os("FLEET_ONLY_WRITE").is_some() {
        return;
    }
    for (name, lake) in [("one host", &one), ("fleet", &fleet)] {
        let (seconds, rss_kib, stderr) = report(&bin, &lake.display().to_string());
        println!(
            "fleet_lake: report --since 24h, {name}: {seconds:.2} s, peak RSS {:.1} MiB\n  {}",
            rss_kib as f64 / 1024.0,
            stderr.lines().last().unwrap_or_default()
        );
    }
    if std::env::var_os("FLEET_KEEP").is_none() {
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
