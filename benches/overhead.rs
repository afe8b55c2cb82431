//! What tracing costs the traced program, and how gpuship compares with bpftrace.
//!
//! - Latency: the stand-in workload times each of N `cuLaunchKernel` calls (`cuda_workload
//!   latency N`) untraced, under gpuship (default probes, blackhole sink) and under bpftrace
//!   running the original notes' kind of script (`uprobe` on every `cu*` of the library printing
//!   a JSON line per call to a file). Added latency = traced - untraced, at p50 and p99.
//! - Throughput: 2 threads call as fast as they can (`threads 2 N`, 2 calls per iteration);
//!   events captured per second of workload time and events lost, gpuship vs bpftrace.
//! - The kernel's floor: the same latency under bpftrace with empty programs on
//!   `cuLaunchKernel` (an entry probe alone, then entry and return probes), i.e. what the
//!   uprobe and uretprobe traps cost on this machine before any tracer does any work.
//! - BPF run time per program invocation (`kernel.bpf_stats_enabled`, read with bpftool).
//!
//! `cargo bench --bench overhead` (root; `make bench` installs bpftrace). Under `cargo test` it
//! runs the gpuship latency scenario once, small, as a smoke test.

#[path = "support/fixtures.rs"]
mod fixtures;
#[path = "support/proc_stats.rs"]
mod proc_stats;
use fixtures::build_fixtures;
use proc_stats::cpu_seconds;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
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

/// p50 and p99 of `count` timed calls: the median of three runs each.
fn latency(fixtures: &Path, count: u64) -> (u64, u64) {
    let mut runs: Vec<(u64, u64)> = (0..3)
        .map(|_| {
            let (out, _) = workload(fixtures, &["latency", &count.to_string()]);
            (field(&out, "p50_ns="), field(&out, "p99_ns="))
        })
        .collect();
    runs.sort();
    runs[1]
}

fn wait_for_line(child: &mut Child, needle: &str) {
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    let needle = needle.to_string();
    std::thread::spawn(move || {
        let mut sent = false;
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if !sent && line.contains(&needle) {
                let _ = tx.send(());
                sent = true;
            }
        }
    });
    rx.recv_timeout(Duration::from_secs(60))
        .expect("tracer started");
}

fn start_gpuship(dir: &Path, fixtures: &Path, entry_only: bool) -> Child {
    let config = format!(
        "[agent]\nstats_interval_secs = 0\nstate_dir = \"{}\"\n[metrics]\nenabled = false\n\
         [sources.xid]\ntracepoint = false\nkmsg = false\n[sources.driver]\nioctl = false\n\
         [sources.cuda]\nlibraries = [\"{}\"]\nfunctions = [\"default\"]\nentry_only = {}\n\
         [[sinks]]\ntype = \"blackhole\"\n",
        dir.join("state").display(),
        fixtures.join("libcuda.so.1").display(),
        if entry_only {
            "[\"cuLaunchKernel*\"]"
        } else {
            "[]"
        }
    );
    std::fs::write(dir.join("overhead.toml"), config).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_gpuship"))
        .args(["run", "--config"])
        .arg(dir.join("overhead.toml"))
        .arg("--summary-json")
        .arg(dir.join("summary.json"))
        .env("RUST_LOG", "info")
        .stderr(Stdio::piped())
        .spawn()
        .expect("gpuship");
    wait_for_line(&mut child, "capture started");
    child
}

/// Stops gpuship; returns (events emitted, events lost in the kernel).
fn stop_gpuship(mut child: Child, dir: &Path) -> (u64, u64) {
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    child.wait().expect("wait");
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("summary.json")).expect("summary"))
            .expect("json");
    let ring = summary["accounting"]["rings"]
        .as_array()
        .and_then(|r| r.iter().find(|r| r["ring"] == "cuda"))
        .cloned()
        .unwrap_or_default();
    (
        ring["emitted"].as_u64().unwrap_or(0),
        ring["lost_in_kernel"].as_u64().unwrap_or(0),
    )
}

/// The original notes' kind of script: every `cu*` of the library, one JSON line per call.
fn json_lines_script(fixtures: &Path) -> String {
    format!(
        "uprobe:{}:cu* {{ printf(\"{{\\\"ts\\\":%llu,\\\"pid\\\":%d,\\\"tid\\\":%d,\\\"fn\\\":\\\"%s\\\"}}\\n\", nsecs, pid, tid, func); }}",
        fixtures.join("libcuda.so.1").display()
    )
}

/// Empty programs on `cuLaunchKernel`: the trap's cost with no tracer work.
fn empty_probes_script(fixtures: &Path, with_return: bool) -> String {
    let lib = fixtures.join("libcuda.so.1");
    let entry = format!("uprobe:{}:cuLaunchKernel {{ }}", lib.display());
    if with_return {
        format!("{entry} uretprobe:{}:cuLaunchKernel {{ }}", lib.display())
    } else {
        entry
    }
}

fn start_bpftrace(script: &str, output: &Path) -> Child {
    let child = Command::new("bpftrace")
        .args(["-q", "-o"])
        .arg(output)
        .args(["-e", script])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("bpftrace (make bench installs it)");
    // With -q bpftrace prints nothing when attached; give it the time attaching takes.
    std::thread::sleep(Duration::from_secs(3));
    child
}

/// Stops bpftrace; returns (lines written, events it reported lost).
fn stop_bpftrace(child: Child, output: &Path) -> (u64, u64) {
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let out = child.wait_with_output().expect("wait");
    let text = std::fs::read_to_string(output).unwrap_or_default();
    let lines = text.lines().filter(|l| l.starts_with('{')).count() as u64;
    let lost = text
        .lines()
        .chain(String::from_utf8_lossy(&out.stderr).lines())
        .filter_map(|l| {
            l.strip_prefix("Lost ")
                .and_then(|r| r.split_whitespace().next())
        })
        .filter_map(|n| n.parse::<u64>().ok())
        .sum();
    (lines, lost)
}

/// Average BPF run time per invocation of gpuship's CUDA programs, from bpftool.
fn bpf_run_time() -> Vec<(String, u64, u64)> {
    let output = Command::new("bpftool")
        .args(["prog", "show", "--json"])
        .output();
    let Ok(output) = output else {
        return Vec::new();
    };
    let progs: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap_or_default();
    progs
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| {
            let name = p["name"].as_str()?;
            name.starts_with("cuda_call").then(|| {
                (
                    name.to_string(),
                    p["run_time_ns"].as_u64().unwrap_or(0),
                    p["run_cnt"].as_u64().unwrap_or(0),
                )
            })
        })
        .collect()
}

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let fixtures = tempfile::tempdir().expect("tempdir");
    build_fixtures(fixtures.path());
    let fx = fixtures.path();
    let calls: u64 = if full { 200_000 } else { 20_000 };

    let (base_p50, base_p99) = latency(fx, calls);
    let dir = tempfile::tempdir().unwrap();
    let agent = start_gpuship(dir.path(), fx, false);
    let _ = std::fs::write("/proc/sys/kernel/bpf_stats_enabled", "1");
    let (g_p50, g_p99) = latency(fx, calls);
    let stats = bpf_run_time();
    let _ = std::fs::write("/proc/sys/kernel/bpf_stats_enabled", "0");
    let (g_events, g_lost) = stop_gpuship(agent, dir.path());
    assert_eq!(g_events, 3 * calls, "gpuship saw every call");

    println!("| mode | per call p50 | per call p99 | added p50 | added p99 | events | lost |");
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    println!("| untraced | {base_p50} ns | {base_p99} ns | | | | |");
    let added = |a: u64, b: u64| a.saturating_sub(b);
    println!(
        "| gpuship (entry + return probes) | {g_p50} ns | {g_p99} ns | {} ns | {} ns | {g_events} | {g_lost} |",
        added(g_p50, base_p50),
        added(g_p99, base_p99)
    );
    let dir = tempfile::tempdir().unwrap();
    let agent = start_gpuship(dir.path(), fx, true);
    let (e_p50, e_p99) = latency(fx, calls);
    let (e_events, e_lost) = stop_gpuship(agent, dir.path());
    assert_eq!(e_events, 3 * calls, "gpuship saw every call");
    println!(
        "| gpuship, launches entry-only | {e_p50} ns | {e_p99} ns | {} ns | {} ns | {e_events} | {e_lost} |",
        added(e_p50, base_p50),
        added(e_p99, base_p99)
    );
    if full {
        let out = dir.path().join("bpftrace.out");
        let tracer = start_bpftrace(&json_lines_script(fx), &out);
        let (b_p50, b_p99) = latency(fx, calls);
        let (b_events, b_lost) = stop_bpftrace(tracer, &out);
        println!(
            "| bpftrace (uprobe cu*, JSON line per call) | {b_p50} ns | {b_p99} ns | {} ns | {} ns | {b_events} | {b_lost} |",
            added(b_p50, base_p50),
            added(b_p99, base_p99)
        );
        for (with_return, mode) in [
            (false, "kernel floor: empty uprobe (bpftrace)"),
            (true, "kernel floor: empty uprobe + uretprobe (bpftrace)"),
        ] {
            let out = dir.path().join("bpftrace-empty.out");
            let tracer = start_bpftrace(&empty_probes_script(fx, with_return), &out);
            let (f_p50, f_p99) = latency(fx, calls);
            let _ = stop_bpftrace(tracer, &out);
            println!(
                "| {mode} | {f_p50} ns | {f_p99} ns | {} ns | {} ns | | |",
                added(f_p50, base_p50),
                added(f_p99, base_p99)
            );
        }

        // Throughput at the workload's maximum rate.
        let per_thread = 500_000u64;
        let expected = 2 * per_thread * 2;
        println!();
        println!("| tracer | workload calls/s | events captured | events/s captured | lost | tracer CPU s |");
        println!("| --- | --- | --- | --- | --- | --- |");
        let (_, untraced_s) = workload(fx, &["threads", "2", &per_thread.to_string()]);
        println!("| none | {:.0} | | | | |", expected as f64 / untraced_s);
        let dir = tempfile::tempdir().unwrap();
        let agent = start_gpuship(dir.path(), fx, false);
        let cpu0 = cpu_seconds(Some(agent.id()));
        let (_, seconds) = workload(fx, &["threads", "2", &per_thread.to_string()]);
        std::thread::sleep(Duration::from_millis(500));
        let cpu = cpu_seconds(Some(agent.id())) - cpu0;
        let (events, lost) = stop_gpuship(agent, dir.path());
        println!(
            "| gpuship | {:.0} | {} | {:.0} | {lost} | {cpu:.2} |",
            expected as f64 / seconds,
            events - lost,
            (events - lost) as f64 / seconds
        );
        let out = dir.path().join("bpftrace-max.out");
        let tracer = start_bpftrace(&json_lines_script(fx), &out);
        let cpu0 = cpu_seconds(Some(tracer.id()));
        let (_, seconds) = workload(fx, &["threads", "2", &per_thread.to_string()]);
        std::thread::sleep(Duration::from_millis(500));
        let cpu = cpu_seconds(Some(tracer.id())) - cpu0;
        let (events, lost) = stop_bpftrace(tracer, &out);
        println!(
            "| bpftrace | {:.0} | {events} | {:.0} | {lost} | {cpu:.2} |",
            expected as f64 / seconds,
            events as f64 / seconds
        );
    }
    println!();
    for (name, run_time_ns, run_cnt) in stats {
        println!(
            "BPF program {name}: {run_cnt} runs, {:.0} ns per run",
            run_time_ns as f64 / run_cnt.max(1) as f64
        );
    }
}
