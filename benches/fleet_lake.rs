//! The fleet-lake benchmark: a synthetic lake of `FLEET_HOSTS` hosts x 24 hours
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
//! `FLEET_HOURS` (default 24) writes fewer or more hours, ending at the last hour boundary,
//! and the commands read that range. `FLEET_KEEP=1` keeps the lake; otherwise it is deleted at the end. `FLEET_ONLY_WRITE=1`
//! writes the lake and stops (to upload it elsewhere, e.g. moto's S3).
//! Without `--bench` (as `cargo test --all-targets` runs it) the defaults are 2 hosts of 200
//! CUDA and 50 driver rows per hour, the agents' file counts and a compaction: a smoke test
//! that the report, the query and the compaction run over such a lake.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

#[path = "support/fleet_writer.rs"]
mod fleet_writer;

use fleet_writer::{write_lake, Sizes, HOUR_NS};

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
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
        hours: env_usize("FLEET_HOURS", 24) as i64,
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
    let (since, until) = (rfc3339(end_ns - sizes.hours * HOUR_NS), rfc3339(end_ns));

    let started = Instant::now();
    let bytes = write_lake(&fleet, hosts, 0, end_ns, &sizes);
    let one_bytes = write_lake(&one, 1, hosts, end_ns, &sizes);
    let files = walk(&fleet);
    let kinds = if sizes.five_kinds { 5 } else { 3 };
    println!(
        "fleet_lake: wrote {hosts} hosts x {} h x {kinds} kinds, {} files per kind-hour: {files} files, {:.2} GB ({:.1} KB per file) in {:.1} s; one host {:.1} MB",
        sizes.hours,
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
