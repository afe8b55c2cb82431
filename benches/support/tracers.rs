//! The tracers the overhead bench compares: the gpuship agent (default probes or launches
//! entry-only, blackhole sink), bpftrace scripts, and the BPF run time of gpuship's programs.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

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

/// Starts gpuship with the default probes into a blackhole sink; launches at entry only and/or
/// in `stats` mode (aggregated in the kernel) when asked, else every call a row.
pub fn start_gpuship(dir: &Path, fixtures: &Path, entry_only: bool, stats: bool) -> Child {
    start_gpuship_with(dir, fixtures, entry_only, stats, "")
}

/// [`start_gpuship`] with `extra` lines in `[sources.cuda]`.
pub fn start_gpuship_with(
    dir: &Path,
    fixtures: &Path,
    entry_only: bool,
    stats: bool,
    extra: &str,
) -> Child {
    let launches = |on: bool| if on { "[\"cuLaunchKernel*\"]" } else { "[]" };
    let config = format!(
        "[agent]\nprogress_interval_secs = 0\nstate_dir = \"{}\"\n[metrics]\nenabled = false\n\
         [sources.xid]\ntracepoint = false\nkmsg = false\n[sources.driver]\nioctl = false\n\
         [sources.cuda]\nlibraries = [\"{}\"]\nfunctions = [\"default\"]\nentry_only = {}\n\
         stats = {}\nstats_entry_only = []\nstats_interval_secs = 1\n{extra}\n[[sinks]]\n\
         type = \"blackhole\"\n",
        dir.join("state").display(),
        fixtures.join("libcuda.so.1").display(),
        launches(entry_only),
        launches(stats),
    );
    std::fs::write(dir.join("overhead.toml"), config).unwrap();
    let mut child = Command::new(super::fixtures::agent_binary())
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
pub fn stop_gpuship(mut child: Child, dir: &Path) -> (u64, u64) {
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
    let count = |name: &str| ring[name].as_u64().unwrap_or(0);
    // Calls in `stats` mode are not ring records: captured when aggregated, lost when the
    // statistics table was full.
    (
        count("emitted") + count("aggregated") + count("stats_full"),
        count("lost_in_kernel") + count("stats_full"),
    )
}

/// The original notes' kind of script: every `cu*` of the library, one JSON line per call.
pub fn json_lines_script(fixtures: &Path) -> String {
    format!(
        "uprobe:{}:cu* {{ printf(\"{{\\\"ts\\\":%llu,\\\"pid\\\":%d,\\\"tid\\\":%d,\\\"fn\\\":\\\"%s\\\"}}\\n\", nsecs, pid, tid, func); }}",
        fixtures.join("libcuda.so.1").display()
    )
}

/// Empty programs on `cuLaunchKernel`: the trap's cost with no tracer work.
pub fn empty_probes_script(fixtures: &Path, with_return: bool) -> String {
    let lib = fixtures.join("libcuda.so.1");
    let entry = format!("uprobe:{}:cuLaunchKernel {{ }}", lib.display());
    if with_return {
        format!("{entry} uretprobe:{}:cuLaunchKernel {{ }}", lib.display())
    } else {
        entry
    }
}

pub fn start_bpftrace(script: &str, output: &Path) -> Child {
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
pub fn stop_bpftrace(child: Child, output: &Path) -> (u64, u64) {
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
pub fn bpf_run_time() -> Vec<(String, u64, u64)> {
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
