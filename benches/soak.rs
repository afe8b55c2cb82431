//! Memory over time: the stand-in libcuda workload at a steady, paced rate -> real uprobes ->
//! the agent -> Parquet, for a long time, with the agent's resident memory sampled throughout.
//! Reports the least-squares slope of RSS (KiB per minute) over the whole run and over its
//! second half, where a leak shows and start-up growth (buffers and caches filling) does not.
//!
//! `cargo bench --bench soak` runs one hour at 68,000 calls/s (root and a BPF-capable kernel
//! required). Under `cargo test` (no `--bench` flag) it runs for a few seconds as a smoke test.
//! Settings (environment): `SOAK_SECS` (duration, default 3600), `SOAK_RATE` (calls/s over all
//! threads, default 68000), `SOAK_THREADS` (default 2), `SOAK_SAMPLE_SECS` (default 10).
//! Each sample is printed as it is taken and the result is written to `target/soak.json`. The
//! run lasts `SOAK_SECS` whatever the machine manages: a workload that has not made its calls by
//! then is stopped, and the rate achieved is reported beside the rate offered.
//! For each hour the run crossed, it reports how long after the hour ended that hour's last
//! CUDA file was finalized (a later hour's rows close the earlier hour's files).
//! To tell the heap from allocator behaviour, run it again with `MALLOC_ARENA_MAX=1` or
//! `MALLOC_TRIM_THRESHOLD_=0` in the environment (the agent inherits it).

#[path = "support/agent.rs"]
mod agent;
#[path = "support/fixtures.rs"]
mod fixtures;
#[path = "support/proc_stats.rs"]
mod proc_stats;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use agent::{cuda_ring, start_agent};
use fixtures::build_fixtures;
use proc_stats::{cpu_seconds, rss_kib};

/// One RSS sample.
struct Sample {
    seconds: f64,
    rss_kib: u64,
    anon_kib: u64,
    file_kib: u64,
}

fn setting(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&v| v > 0)
        .unwrap_or(default)
}

/// Least-squares slope of `y` over `x`; 0 for fewer than two points.
fn slope(points: &[(f64, f64)]) -> f64 {
    let n = points.len() as f64;
    if points.len() < 2 {
        return 0.0;
    }
    let mean_x = points.iter().map(|p| p.0).sum::<f64>() / n;
    let mean_y = points.iter().map(|p| p.1).sum::<f64>() / n;
    let covariance: f64 = points.iter().map(|p| (p.0 - mean_x) * (p.1 - mean_y)).sum();
    let variance: f64 = points.iter().map(|p| (p.0 - mean_x).powi(2)).sum();
    if variance == 0.0 {
        0.0
    } else {
        covariance / variance
    }
}

/// KiB per minute of one RSS series over `samples`.
fn kib_per_minute(samples: &[Sample], value: fn(&Sample) -> u64) -> f64 {
    let points: Vec<(f64, f64)> = samples
        .iter()
        .map(|s| (s.seconds / 60.0, value(s) as f64))
        .collect();
    slope(&points)
}

/// For each hour folder of `kind_dir` (`dt=YYYY-MM-DD/hour=HH`) but the newest, its file count
/// and how long after the end of that hour its last file was finalized (the file's mtime: a
/// file is written whole and renamed into place when it is finalized). With earlier hours
/// closed as a later hour opens, that is seconds, not `max_file_age_secs`.
fn hour_boundaries(kind_dir: &std::path::Path) -> Vec<(String, usize, f64)> {
    let mut hours = Vec::new();
    for day in std::fs::read_dir(kind_dir).into_iter().flatten().flatten() {
        for hour in std::fs::read_dir(day.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            let name = format!(
                "{}/{}",
                day.file_name().to_string_lossy(),
                hour.file_name().to_string_lossy()
            );
            let mtimes: Vec<std::time::SystemTime> = std::fs::read_dir(hour.path())
                .into_iter()
                .flatten()
                .flatten()
                .filter(|f| f.file_name().to_string_lossy().ends_with(".parquet"))
                .filter_map(|f| f.metadata().ok()?.modified().ok())
                .collect();
            hours.push((name, mtimes));
        }
    }
    hours.sort_by(|a, b| a.0.cmp(&b.0));
    hours.pop();
    hours
        .into_iter()
        .filter_map(|(name, mtimes)| {
            let end = hour_end(&name)?;
            let last = mtimes.iter().max()?;
            let after = match last.duration_since(end) {
                Ok(after) => after.as_secs_f64(),
                Err(before) => -before.duration().as_secs_f64(),
            };
            Some((name, mtimes.len(), after))
        })
        .collect()
}

/// The end of the hour `dt=YYYY-MM-DD/hour=HH` names.
fn hour_end(name: &str) -> Option<std::time::SystemTime> {
    let (day, hour) = name.strip_prefix("dt=")?.split_once("/hour=")?;
    let date = chrono::NaiveDate::parse_from_str(day, "%Y-%m-%d").ok()?;
    let start = date.and_hms_opt(hour.parse().ok()?, 0, 0)?.and_utc();
    let end = start.timestamp() + 3_600;
    Some(std::time::UNIX_EPOCH + Duration::from_secs(u64::try_from(end).ok()?))
}

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    // The fit itself: y = 3 + 2x exactly, and a flat series.
    assert_eq!(
        slope(&[(0.0, 3.0), (1.0, 5.0), (2.0, 7.0), (4.0, 11.0)]),
        2.0
    );
    assert_eq!(slope(&[(0.0, 5.0), (1.0, 5.0)]), 0.0);
    assert_eq!(
        hour_end("dt=2026-11-22/hour=03"),
        Some(std::time::UNIX_EPOCH + Duration::from_secs(1_795_320_000))
    );
    assert_eq!(hour_end("dt=2026-11-22/hour=xx"), None);
    let seconds = setting("SOAK_SECS", if full { 3600 } else { 6 });
    let rate = setting("SOAK_RATE", if full { 68_000 } else { 20_000 });
    let threads = setting("SOAK_THREADS", 2);
    let every = Duration::from_secs(setting("SOAK_SAMPLE_SECS", if full { 10 } else { 1 }));
    // Each iteration of the workload's threads is two calls (an allocation and a free).
    let iterations = (rate * seconds / threads / 2).max(64);
    let offered = iterations * threads * 2;

    let fixtures = tempfile::tempdir().expect("tempdir");
    build_fixtures(fixtures.path());
    let libcuda = fixtures.path().join("libcuda.so.1");
    let dir = tempfile::tempdir().expect("tempdir");
    let sink = format!(
        "type = \"parquet\"\npath = \"{}\"",
        dir.path().join("lake").display()
    );
    let mut agent = start_agent(dir.path(), &libcuda, "", &sink);
    let pid = agent.id();
    let cpu_before = cpu_seconds(Some(pid));
    println!(
        "soak: {seconds} s at {rate} calls/s over {threads} threads into Parquet; RSS every {} s",
        every.as_secs()
    );
    let started = Instant::now();
    let mut workload = Command::new(fixtures.path().join("cuda_workload"))
        .args([
            "threads".to_string(),
            threads.to_string(),
            iterations.to_string(),
            (rate / threads).to_string(),
        ])
        .env("CUDA_LIB", &libcuda)
        .stdout(Stdio::null())
        .spawn()
        .expect("workload");
    let mut samples = Vec::new();
    // The soak lasts its duration: a loaded machine runs the paced workload slower than
    // offered, so it is stopped at the deadline if it has not finished by then.
    let deadline = started + Duration::from_secs(seconds);
    let (status, cut_short) = loop {
        let (rss_kib, anon_kib, file_kib) = rss_kib(pid);
        let sample = Sample {
            seconds: started.elapsed().as_secs_f64(),
            rss_kib,
            anon_kib,
            file_kib,
        };
        println!(
            "soak: t={:.0}s rss={:.1} MiB anon={:.1} MiB file={:.1} MiB",
            sample.seconds,
            rss_kib as f64 / 1024.0,
            anon_kib as f64 / 1024.0,
            file_kib as f64 / 1024.0
        );
        let _ = std::io::stdout().flush();
        samples.push(sample);
        if let Some(status) = workload.try_wait().expect("wait") {
            break (status, false);
        }
        if Instant::now() >= deadline {
            // SAFETY: kill(2) on our own child.
            unsafe { libc::kill(workload.id() as i32, libc::SIGTERM) };
            break (workload.wait().expect("wait"), true);
        }
        let next = started + every * samples.len() as u32;
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
    };
    assert!(cut_short || status.success(), "workload failed");
    let wall = started.elapsed().as_secs_f64();
    std::thread::sleep(Duration::from_millis(500));
    let cpu = cpu_seconds(Some(pid)) - cpu_before;
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    agent.wait().expect("agent exit");
    let (events, lost) = cuda_ring(dir.path());
    if !cut_short {
        assert_eq!(events, offered, "every call the workload made was seen");
    }

    let boundaries = hour_boundaries(&dir.path().join("lake").join("cuda"));
    for (hour, files, after) in &boundaries {
        println!(
            "soak: {hour}: {files} files, the last finalized {after:.1} s after the hour ended"
        );
    }

    let second_half = &samples[samples.len() / 2..];
    let first = samples.first().map_or(0, |s| s.rss_kib);
    let last = samples.last().map_or(0, |s| s.rss_kib);
    let peak = samples.iter().map(|s| s.rss_kib).max().unwrap_or(0);
    let report = serde_json::json!({
        "seconds": wall, "offered_calls_per_second": rate, "threads": threads,
        "workload_stopped_at_deadline": cut_short,
        "events": events, "lost_in_kernel": lost,
        "achieved_calls_per_second": events as f64 / wall,
        "agent_cpu_us_per_event": cpu * 1e6 / (events - lost).max(1) as f64,
        "rss_first_kib": first, "rss_last_kib": last, "rss_peak_kib": peak,
        "rss_slope_kib_per_min": kib_per_minute(&samples, |s| s.rss_kib),
        "rss_slope_second_half_kib_per_min": kib_per_minute(second_half, |s| s.rss_kib),
        "anon_slope_second_half_kib_per_min": kib_per_minute(second_half, |s| s.anon_kib),
        "file_slope_second_half_kib_per_min": kib_per_minute(second_half, |s| s.file_kib),
        "hours_closed": boundaries.iter().map(|(hour, files, after)| serde_json::json!({
            "hour": hour, "files": files, "last_finalized_after_hour_end_secs": after,
        })).collect::<Vec<_>>(),
        "samples": samples.iter().map(|s| [s.seconds, s.rss_kib as f64, s.anon_kib as f64,
            s.file_kib as f64]).collect::<Vec<_>>(),
    });
    println!(
        "soak: {events} events ({lost} lost in the kernel) in {wall:.0} s = {:.0} calls/s; RSS \
         {:.1} -> {:.1} MiB (peak {:.1}); slope {:.1} KiB/min over the run, {:.1} KiB/min over \
         the second half (anon {:.1}, file {:.1})",
        events as f64 / wall,
        first as f64 / 1024.0,
        last as f64 / 1024.0,
        peak as f64 / 1024.0,
        report["rss_slope_kib_per_min"].as_f64().unwrap_or(0.0),
        report["rss_slope_second_half_kib_per_min"]
            .as_f64()
            .unwrap_or(0.0),
        report["anon_slope_second_half_kib_per_min"]
            .as_f64()
            .unwrap_or(0.0),
        report["file_slope_second_half_kib_per_min"]
            .as_f64()
            .unwrap_or(0.0),
    );
    let out = concat!(env!("CARGO_MANIFEST_DIR"), "/target/soak.json");
    let _ = std::fs::write(out, serde_json::to_vec_pretty(&report).unwrap_or_default());
}
