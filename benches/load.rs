//! End-to-end load harness: the stand-in libcuda workload -> real uprobes -> the release agent
//! -> a sink. Reports sustained events/s, events lost in the kernel, agent CPU per event and
//! the agent's peak RSS.
//!
//! `cargo bench --bench load` runs every scenario (root and a BPF-capable kernel required).
//! Under `cargo test` (no `--bench` flag) it runs one small scenario as a smoke test.
//! `LOAD_SCENARIO=<text>` keeps only the scenarios whose name contains it, e.g.
//! `LOAD_SCENARIO="2 threads, parquet" cargo bench --bench load` (a full name keeps that scenario
//! alone). `LOAD_RUNS=N` runs each
//! scenario N times in turn and reports the median run (by CPU per event) with the range of
//! CPU per event and events/s, and the most lost and the highest peak RSS of any run: a shared
//! VM's runs vary by a fifth.

#[path = "support/agent.rs"]
mod agent;
#[path = "support/fixtures.rs"]
mod fixtures;
#[path = "support/proc_stats.rs"]
mod proc_stats;
use agent::{cuda_ring, start_agent};
use fixtures::build_fixtures;
use proc_stats::{cpu_seconds, peak_rss_kib as peak_rss_kib_of};

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Scenario {
    name: &'static str,
    threads: u32,
    calls_per_thread: u32,
    sink: &'static str,
}

/// Both of the workload's functions traced at entry only: a call costs one trap instead of two,
/// so two threads make events faster than the default probes let them, and the pipeline's
/// own limit shows.
const ENTRY_ONLY: &str = "parquet-entry-only";

/// Both of the workload's functions in `stats` mode: added up in the kernel, no ring record and
/// no agent work per call; the agent reads the table every interval (1 s here).
const STATS: &str = "parquet-stats";
/// The same with both at entry only: no return probe either (no durations, no results).
const STATS_ENTRY_ONLY: &str = "parquet-stats-entry-only";

/// Settings of `config/examples/large-files.toml`, applied to the harness's config.
const LARGE_FILES: (&str, &str, &str) = (
    "ring_size_mib = 16\n[batch]\nmax_events = 65536\n",
    "max_file_bytes = 67108864\nrow_group_bytes = 8388608\n[sinks.buffer]\nmax_bytes = 33554432\n",
    "parquet-large-files",
);

/// One run's figures.
struct Outcome {
    events: u64,
    lost: u64,
    events_per_second: f64,
    cpu_per_event_us: f64,
    peak_rss_kib: u64,
}

fn start(dir: &Path, libcuda: &Path, sink: &str) -> Child {
    let lake = dir.join("lake");
    let (cuda_extra, sink_config) = match sink {
        "parquet" => (
            String::new(),
            format!("type = \"parquet\"\npath = \"{}\"", lake.display()),
        ),
        s if s == LARGE_FILES.2 => (
            LARGE_FILES.0.to_string(),
            format!(
                "type = \"parquet\"\npath = \"{}\"\n{}",
                lake.display(),
                LARGE_FILES.1
            ),
        ),
        ENTRY_ONLY => (
            "entry_only = [\"cuMemAlloc_v2\", \"cuMemFree_v2\"]\n".to_string(),
            format!("type = \"parquet\"\npath = \"{}\"", lake.display()),
        ),
        STATS | STATS_ENTRY_ONLY => (
            format!(
                "stats = [\"cuMemAlloc_v2\", \"cuMemFree_v2\"]\nstats_interval_secs = 1\n{}",
                if sink == STATS_ENTRY_ONLY {
                    "entry_only = [\"cuMemAlloc_v2\", \"cuMemFree_v2\"]\n"
                } else {
                    ""
                }
            ),
            format!("type = \"parquet\"\npath = \"{}\"", lake.display()),
        ),
        _ => (String::new(), "type = \"blackhole\"".to_string()),
    };
    start_agent(dir, libcuda, &cuda_extra, &sink_config)
}

fn run(scenario: &Scenario, fixtures: &Path) -> Outcome {
    let dir = tempfile::tempdir().expect("tempdir");
    let libcuda = fixtures.join("libcuda.so.1");
    let mut agent = start(dir.path(), &libcuda, scenario.sink);
    let pid = agent.id();
    let cpu_before = cpu_seconds(Some(pid));
    let started = Instant::now();
    let status = Command::new(fixtures.join("cuda_workload"))
        .args([
            "threads",
            &scenario.threads.to_string(),
            &scenario.calls_per_thread.to_string(),
        ])
        .env("CUDA_LIB", &libcuda)
        .stdout(Stdio::null())
        .status()
        .expect("workload");
    assert!(status.success());
    let seconds = started.elapsed().as_secs_f64();
    // Let the agent catch up with the ring before measuring its CPU and memory.
    std::thread::sleep(Duration::from_millis(500));
    let cpu_seconds = cpu_seconds(Some(pid)) - cpu_before;
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    let mut peak_rss_kib = 0;
    while agent.try_wait().expect("wait").is_none() {
        peak_rss_kib = peak_rss_kib.max(peak_rss_kib_of(pid));
        std::thread::sleep(Duration::from_millis(10));
    }
    let (events, lost) = cuda_ring(dir.path());
    Outcome {
        events,
        lost,
        events_per_second: events as f64 / seconds,
        cpu_per_event_us: cpu_seconds * 1e6 / (events - lost).max(1) as f64,
        peak_rss_kib,
    }
}

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let fixtures = tempfile::tempdir().expect("tempdir");
    build_fixtures(fixtures.path());
    let scenarios: Vec<Scenario> = if full {
        vec![
            Scenario {
                name: "1 thread, blackhole",
                threads: 1,
                calls_per_thread: 1_000_000,
                sink: "blackhole",
            },
            Scenario {
                name: "2 threads, blackhole",
                threads: 2,
                calls_per_thread: 1_000_000,
                sink: "blackhole",
            },
            Scenario {
                name: "1 thread, parquet",
                threads: 1,
                calls_per_thread: 1_000_000,
                sink: "parquet",
            },
            Scenario {
                name: "2 threads, parquet",
                threads: 2,
                calls_per_thread: 1_000_000,
                sink: "parquet",
            },
            Scenario {
                name: "2 threads, parquet, entry-only probes",
                threads: 2,
                calls_per_thread: 1_000_000,
                sink: ENTRY_ONLY,
            },
            Scenario {
                name: "2 threads, parquet, stats mode",
                threads: 2,
                calls_per_thread: 1_000_000,
                sink: STATS,
            },
            Scenario {
                name: "2 threads, parquet, stats mode, entry-only probes",
                threads: 2,
                calls_per_thread: 1_000_000,
                sink: STATS_ENTRY_ONLY,
            },
            Scenario {
                name: "1 thread, parquet, large-files profile",
                threads: 1,
                calls_per_thread: 1_000_000,
                sink: LARGE_FILES.2,
            },
            Scenario {
                name: "2 threads, parquet, large-files profile",
                threads: 2,
                calls_per_thread: 1_000_000,
                sink: LARGE_FILES.2,
            },
        ]
    } else {
        vec![Scenario {
            name: "smoke: 1 thread, parquet",
            threads: 1,
            calls_per_thread: 20_000,
            sink: "parquet",
        }]
    };
    let wanted = std::env::var("LOAD_SCENARIO").unwrap_or_default();
    // A name given in full keeps that scenario alone ("2 threads, parquet" is also the start of
    // four other names); otherwise every name containing the text.
    let exact = scenarios.iter().any(|s| s.name == wanted);
    let scenarios: Vec<Scenario> = scenarios
        .into_iter()
        .filter(|s| {
            if exact {
                s.name == wanted
            } else {
                s.name.contains(wanted.as_str())
            }
        })
        .collect();
    assert!(
        !scenarios.is_empty(),
        "no scenario matches LOAD_SCENARIO={wanted:?}"
    );
    let runs: usize = std::env::var("LOAD_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
        .max(1);
    // Rounds in turn, so that a slow spell of the machine hits every scenario alike.
    let mut measured: Vec<Vec<Outcome>> = scenarios.iter().map(|_| Vec::new()).collect();
    for _ in 0..runs {
        for (scenario, outcomes) in scenarios.iter().zip(&mut measured) {
            let outcome = run(scenario, fixtures.path());
            assert_eq!(
                outcome.events,
                u64::from(scenario.threads) * u64::from(scenario.calls_per_thread) * 2
            );
            outcomes.push(outcome);
        }
    }
    println!("| scenario | runs | events | lost in kernel | events/s (workload wall time) | agent CPU per event | agent peak RSS |");
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    let mut results = Vec::new();
    for (scenario, mut outcomes) in scenarios.iter().zip(measured) {
        outcomes.sort_by(|a, b| a.cpu_per_event_us.total_cmp(&b.cpu_per_event_us));
        let median = &outcomes[outcomes.len() / 2];
        let most_lost = outcomes.iter().map(|o| o.lost).max().unwrap_or(0);
        let peak_rss_kib = outcomes.iter().map(|o| o.peak_rss_kib).max().unwrap_or(0);
        let range = |value: fn(&Outcome) -> f64, digits: usize| {
            let low = outcomes.iter().map(value).fold(f64::INFINITY, f64::min);
            let high = outcomes.iter().map(value).fold(0.0, f64::max);
            if outcomes.len() > 1 {
                format!(" ({low:.digits$} to {high:.digits$})")
            } else {
                String::new()
            }
        };
        println!(
            "| {} | {} | {} | {} | {:.0}{} | {:.3} µs{} | {:.1} MiB |",
            scenario.name,
            outcomes.len(),
            median.events,
            most_lost,
            median.events_per_second,
            range(|o| o.events_per_second, 0),
            median.cpu_per_event_us,
            range(|o| o.cpu_per_event_us, 3),
            peak_rss_kib as f64 / 1024.0
        );
        results.push(serde_json::json!({
            "scenario": scenario.name, "runs": outcomes.len(), "events": median.events,
            "lost_in_kernel_most": most_lost, "events_per_second": median.events_per_second,
            "agent_cpu_us_per_event": median.cpu_per_event_us,
            "agent_cpu_us_per_event_all_runs":
                outcomes.iter().map(|o| o.cpu_per_event_us).collect::<Vec<_>>(),
            "agent_peak_rss_kib_highest": peak_rss_kib,
        }));
    }
    let out: PathBuf = [env!("CARGO_MANIFEST_DIR"), "target", "load-harness.json"]
        .iter()
        .collect();
    let _ = std::fs::write(
        &out,
        serde_json::to_vec_pretty(&results).unwrap_or_default(),
    );
}
