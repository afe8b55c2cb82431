//! What tracing costs the traced program, and how gpuship compares with bpftrace.
//!
//! - Latency: the stand-in workload times each of N `cuLaunchKernel` calls (`cuda_workload
//!   latency N`) untraced, under gpuship (default probes, blackhole sink) and under bpftrace
//!   running the original notes' kind of script (`uprobe` on every `cu*` of the library printing
//!   a JSON line per call to a file). Added latency = traced - untraced, at p50 and p99.
//!   Five rounds, every mode once per round in rotated order; the table shows the medians.
//! - Throughput: 2 threads call as fast as they can (`threads 2 N`, 2 calls per iteration),
//!   then at a fixed rate (`threads 2 N RATE`); per tracer: the workload's calls/s, events
//!   captured per second of workload time, events lost, tracer CPU per event and peak RSS.
//! - The kernel's floor: the same latency under bpftrace with empty programs on
//!   `cuLaunchKernel` (an entry probe alone, then entry and return probes), i.e. what the
//!   uprobe and uretprobe traps cost on this machine before any tracer does any work.
//! - BPF run time per program invocation (`kernel.bpf_stats_enabled`, read with bpftool), in
//!   a separate, shorter run: the statistics add two clock reads to every program run, so the
//!   timed runs keep them off, as the bpftrace floor does.
//!
//! `OVERHEAD_MODES=untraced,stats,floor` runs a subset of the modes (keys in `Mode::key`),
//! `OVERHEAD_ROUNDS=N` sets the rounds; the throughput runs are left out with a subset.
//!
//! `cargo bench --bench overhead` (root; `make bench` installs bpftrace). Under `cargo test` it
//! runs the gpuship latency scenario once, small, as a smoke test.

#[path = "support/fixtures.rs"]
mod fixtures;
#[path = "support/proc_stats.rs"]
mod proc_stats;
#[path = "support/tracers.rs"]
mod tracers;
use fixtures::build_fixtures;
use proc_stats::cpu_seconds;
use tracers::{
    bpf_run_time, empty_probes_script, json_lines_script, start_bpftrace, start_gpuship,
    start_gpuship_with, stop_bpftrace, stop_gpuship,
};

use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// Runs the workload; returns its stdout.
fn workload(fixtures: &Path, args: &[&str]) -> (String, f64) {
    let started = Instant::now();
    let output = Command::new(fixtures.join("cuda_workload"))
        .args(args)
        .env("CUDA_LIB", fixtures.join("libcuda.so.1"))
        .output()
        .expect("workload");
    assert!(output.status.success());
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        started.elapsed().as_secs_f64(),
    )
}

fn field(text: &str, key: &str) -> u64 {
    text.split_whitespace()
        .find_map(|w| w.strip_prefix(key))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {key} in {text:?}"))
}

/// p50 and p99 of `count` timed calls, one run.
fn latency(fixtures: &Path, count: u64) -> (u64, u64) {
    let (out, _) = workload(fixtures, &["latency", &count.to_string()]);
    (field(&out, "p50_ns="), field(&out, "p99_ns="))
}

/// What traces the latency runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Untraced,
    Gpuship,
    GpushipLaunchesEntryOnly,
    GpushipStats,
    GpushipStatsNoRecorder,
    GpushipStatsEntryOnly,
    BpftraceJsonLines,
    FloorEntry,
    FloorEntryReturn,
}

impl Mode {
    const ALL: [Mode; 9] = [
        Mode::Untraced,
        Mode::Gpuship,
        Mode::GpushipLaunchesEntryOnly,
        Mode::GpushipStats,
        Mode::GpushipStatsNoRecorder,
        Mode::GpushipStatsEntryOnly,
        Mode::BpftraceJsonLines,
        Mode::FloorEntry,
        Mode::FloorEntryReturn,
    ];

    /// The short name `OVERHEAD_MODES` selects the mode by.
    fn key(self) -> &'static str {
        match self {
            Mode::Untraced => "untraced",
            Mode::Gpuship => "rows",
            Mode::GpushipLaunchesEntryOnly => "rows-entry-only",
            Mode::GpushipStats => "stats",
            Mode::GpushipStatsNoRecorder => "stats-no-recorder",
            Mode::GpushipStatsEntryOnly => "stats-entry-only",
            Mode::BpftraceJsonLines => "bpftrace",
            Mode::FloorEntry => "floor-entry",
            Mode::FloorEntryReturn => "floor",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Mode::Untraced => "untraced",
            Mode::Gpuship => "gpuship (entry + return probes)",
            Mode::GpushipLaunchesEntryOnly => "gpuship, launches entry-only",
            Mode::GpushipStats => "gpuship, launches in stats mode (entry + return)",
            Mode::GpushipStatsNoRecorder => {
                "gpuship, launches in stats mode (entry + return), flight recorder off"
            }
            Mode::GpushipStatsEntryOnly => "gpuship, launches in stats mode, entry-only",
            Mode::BpftraceJsonLines => "bpftrace (uprobe cu*, JSON line per call)",
            Mode::FloorEntry => "kernel floor: empty uprobe (bpftrace)",
            Mode::FloorEntryReturn => "kernel floor: empty uprobe + uretprobe (bpftrace)",
        }
    }
}

/// A running tracer and where its output goes.
enum Tracer {
    None,
    Gpuship(Child, tempfile::TempDir),
    Bpftrace(Child, tempfile::TempDir),
}

impl Tracer {
    /// The tracer's process, if one runs.
    fn pid(&self) -> Option<u32> {
        match self {
            Tracer::None => None,
            Tracer::Gpuship(child, _) | Tracer::Bpftrace(child, _) => Some(child.id()),
        }
    }

    fn start(mode: Mode, fx: &Path) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let bpftrace = |script: String, dir: tempfile::TempDir| {
            Tracer::Bpftrace(start_bpftrace(&script, &dir.path().join("out")), dir)
        };
        match mode {
            Mode::Untraced => Tracer::None,
            Mode::Gpuship => Tracer::Gpuship(start_gpuship(dir.path(), fx, false, false), dir),
            Mode::GpushipLaunchesEntryOnly => {
                Tracer::Gpuship(start_gpuship(dir.path(), fx, true, false), dir)
            }
            Mode::GpushipStats => Tracer::Gpuship(start_gpuship(dir.path(), fx, false, true), dir),
            Mode::GpushipStatsNoRecorder => Tracer::Gpuship(
                start_gpuship_with(
                    dir.path(),
                    fx,
                    false,
                    true,
                    "flight_recorder_slots_per_cpu = 0",
                ),
                dir,
            ),
            Mode::GpushipStatsEntryOnly => {
                Tracer::Gpuship(start_gpuship(dir.path(), fx, true, true), dir)
            }
            Mode::BpftraceJsonLines => bpftrace(json_lines_script(fx), dir),
            Mode::FloorEntry => bpftrace(empty_probes_script(fx, false), dir),
            Mode::FloorEntryReturn => bpftrace(empty_probes_script(fx, true), dir),
        }
    }

    /// Stops the tracer; returns (events captured, events lost).
    fn stop(self) -> (u64, u64) {
        match self {
            Tracer::None => (0, 0),
            Tracer::Gpuship(child, dir) => stop_gpuship(child, dir.path()),
            Tracer::Bpftrace(child, dir) => stop_bpftrace(child, &dir.path().join("out")),
        }
    }
}

/// One mode's latency runs over all rounds.
#[derive(Debug, Clone, Default)]
struct ModeRuns {
    /// Each round's (p50, p99) in ns.
    percentiles: Vec<(u64, u64)>,
    /// Events the tracer captured and lost, over all rounds.
    events: u64,
    lost: u64,
}

/// gpuship's BPF programs in one mode: (mode, program name, run time ns, runs).
type BpfRunTimes = Vec<(Mode, String, u64, u64)>;

/// Every mode's latency runs, `rounds` times in rotated order (so that a slow spell of a
/// shared machine does not land on one mode); BPF stats are on during gpuship's runs with
/// return probes (rows and stats mode). Returns each mode's runs, and gpuship's BPF programs
/// per mode, summed over the rounds.
fn latency_rounds(
    fx: &Path,
    modes: &[Mode],
    rounds: usize,
    calls: u64,
) -> (Vec<ModeRuns>, BpfRunTimes) {
    let mut results = vec![ModeRuns::default(); modes.len()];
    let mut stats: BpfRunTimes = Vec::new();
    for round in 0..rounds {
        for offset in 0..modes.len() {
            let index = (round + offset) % modes.len();
            let mode = modes[index];
            let tracer = Tracer::start(mode, fx);
            let with_stats = matches!(
                mode,
                Mode::Gpuship
                    | Mode::GpushipStats
                    | Mode::GpushipStatsNoRecorder
                    | Mode::GpushipStatsEntryOnly
            );
            // The timed run with BPF statistics off: they cost every program run two clock
            // reads (about 150 ns per call on this VM with entry and return), which the
            // bpftrace floor does not pay. A second, shorter run measures the run time.
            let percentiles = latency(fx, calls);
            let mut expected = calls;
            if with_stats {
                let _ = std::fs::write("/proc/sys/kernel/bpf_stats_enabled", "1");
                latency(fx, calls / 4);
                expected += calls / 4;
                for (name, run_time_ns, run_cnt) in bpf_run_time() {
                    match stats
                        .iter_mut()
                        .find(|(m, n, _, _)| *m == mode && *n == name)
                    {
                        Some(total) => {
                            total.2 += run_time_ns;
                            total.3 += run_cnt;
                        }
                        None => stats.push((mode, name, run_time_ns, run_cnt)),
                    }
                }
                let _ = std::fs::write("/proc/sys/kernel/bpf_stats_enabled", "0");
            }
            let (events, lost) = tracer.stop();
            if matches!(
                mode,
                Mode::Gpuship
                    | Mode::GpushipLaunchesEntryOnly
                    | Mode::GpushipStats
                    | Mode::GpushipStatsNoRecorder
                    | Mode::GpushipStatsEntryOnly
            ) {
                assert_eq!(events, expected, "gpuship saw every call");
            }
            let runs = &mut results[index];
            runs.percentiles.push(percentiles);
            runs.events += events;
            runs.lost += lost;
        }
    }
    (results, stats)
}

/// Two workload threads of 250,000 allocation/free pairs each, at `calls_per_sec` per thread
/// (0: flat out), untraced, under gpuship (default probes) and under bpftrace: the workload's
/// calls/s, events captured and lost, and the tracer's CPU per captured event and peak RSS.
fn throughput(fx: &Path, calls_per_sec: u64) {
    let per_thread = 250_000u64;
    let expected = 2 * per_thread * 2;
    let rate = match calls_per_sec {
        0 => "as fast as they can".to_string(),
        r => format!("at {r} calls/s each"),
    };
    println!();
    println!("2 threads, {expected} calls in all, {rate}:");
    println!();
    println!("| tracer | workload calls/s | events captured | events/s captured | lost | tracer CPU per event | tracer peak RSS |");
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    let args = [
        "threads".to_string(),
        "2".to_string(),
        per_thread.to_string(),
        calls_per_sec.to_string(),
    ];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    for mode in [Mode::Untraced, Mode::Gpuship, Mode::BpftraceJsonLines] {
        let tracer = Tracer::start(mode, fx);
        let pid = tracer.pid();
        let cpu0 = pid.map_or(0.0, |p| cpu_seconds(Some(p)));
        let (_, seconds) = workload(fx, &args);
        let calls_per_second = expected as f64 / seconds;
        if mode == Mode::Untraced {
            println!("| none | {calls_per_second:.0} | | | | | |");
            continue;
        }
        // Let the tracer catch up with its buffers before reading its CPU and memory.
        std::thread::sleep(Duration::from_millis(500));
        let pid = pid.expect("a tracer process");
        let cpu = cpu_seconds(Some(pid)) - cpu0;
        let rss_mib = proc_stats::peak_rss_kib(pid) as f64 / 1024.0;
        let (events, lost) = tracer.stop();
        let captured = match mode {
            Mode::Gpuship => events - lost,
            _ => events,
        };
        println!(
            "| {} | {calls_per_second:.0} | {captured} | {:.0} | {lost} | {:.2} µs | {rss_mib:.1} MiB |",
            mode.label(),
            captured as f64 / seconds,
            cpu * 1e6 / captured.max(1) as f64
        );
    }
}

fn median(mut values: Vec<u64>) -> u64 {
    values.sort_unstable();
    values[values.len() / 2]
}

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let fixtures = tempfile::tempdir().expect("tempdir");
    build_fixtures(fixtures.path());
    let fx = fixtures.path();
    let calls: u64 = if full { 200_000 } else { 20_000 };

    // OVERHEAD_MODES="untraced,stats,floor" runs a subset (untraced always runs: the added
    // latencies are measured against it); OVERHEAD_ROUNDS sets the rounds.
    let selected = std::env::var("OVERHEAD_MODES").ok();
    let modes: Vec<Mode> = Mode::ALL
        .into_iter()
        .filter(|m| full || matches!(m, Mode::Untraced | Mode::Gpuship))
        .filter(|m| match &selected {
            Some(keys) => *m == Mode::Untraced || keys.split(',').any(|k| k.trim() == m.key()),
            None => true,
        })
        .collect();
    let rounds = match std::env::var("OVERHEAD_ROUNDS") {
        Ok(value) => value
            .parse()
            .expect("OVERHEAD_ROUNDS is a number of rounds"),
        Err(_) if full => 5,
        Err(_) => 1,
    };
    let (results, stats) = latency_rounds(fx, &modes, rounds, calls);
    println!("Latency of {calls} timed cuLaunchKernel calls per run; median of {rounds} rounds, modes in rotated order.");
    println!();
    println!("| mode | per call p50 | per call p99 | added p50 | added p99 | events | lost |");
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    let p50 = |runs: &ModeRuns| median(runs.percentiles.iter().map(|r| r.0).collect());
    let p99 = |runs: &ModeRuns| median(runs.percentiles.iter().map(|r| r.1).collect());
    let (base_p50, base_p99) = (p50(&results[0]), p99(&results[0]));
    for (mode, runs) in modes.iter().zip(&results) {
        let (m50, m99) = (p50(runs), p99(runs));
        match mode {
            Mode::Untraced => println!("| {} | {m50} ns | {m99} ns | | | | |", mode.label()),
            _ => {
                // The empty bpftrace probes capture nothing; their counts stay blank.
                let counts = match mode {
                    Mode::FloorEntry | Mode::FloorEntryReturn => " | ".to_string(),
                    _ => format!("{} | {}", runs.events, runs.lost),
                };
                println!(
                    "| {} | {m50} ns | {m99} ns | {} ns | {} ns | {counts} |",
                    mode.label(),
                    m50.saturating_sub(base_p50),
                    m99.saturating_sub(base_p99)
                );
            }
        }
    }
    if full && selected.is_none() {
        // Two threads of allocations and frees, flat out and then paced.
        throughput(fx, 0);
        throughput(fx, 250_000);
    }
    println!();
    for (mode, name, run_time_ns, run_cnt) in stats {
        println!(
            "BPF program {name} ({}): {run_cnt} runs, {:.0} ns per run",
            mode.label(),
            run_time_ns as f64 / run_cnt.max(1) as f64
        );
    }
}
