//! Repeated kernel lookups counted at entry without their return probe
//! (`bpf/include/cuda_lookup_memo.h`), on real eBPF with the stand-in library: which lookups
//! the kernel must still probe (a thread's first, and every one after its own context change,
//! an unload, a failed call or an exec, and after an unload that another thread's lookup
//! overlapped), and that the setting and an unprobed function that changes answers turn it off.
//! On a kernel without `uprobe.session` (before Linux 6.13) every lookup keeps its return, and
//! the tests check that instead.

use std::collections::BTreeMap;

use crate::support;
use crate::support::agent::{data_dir, Agent};
use crate::support::cuda_stats::stats_rows;
use crate::support::lake::{duckdb, read_table};
use crate::support::Fixtures;

/// Whether this kernel has `uprobe.session` programs (Linux >= 6.13), which the agent needs to
/// count repeats at entry.
pub fn sessions_supported() -> bool {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut numbers = release
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|p| p.parse::<u32>().ok());
    (numbers.next().unwrap_or(0), numbers.next().unwrap_or(0)) >= (6, 13)
}

/// `(probed, counted at entry)` as expected here: on a kernel without sessions, every lookup
/// is probed.
pub fn split(probed: u64, at_entry: u64) -> Vec<(&'static str, u64)> {
    if sessions_supported() {
        vec![("CUDA_SUCCESS", probed), ("NOT_CAPTURED", at_entry)]
    } else {
        vec![("CUDA_SUCCESS", probed + at_entry)]
    }
}

/// Runs `cuda_workload lookup-memo` (which execs into `kernel-functions 2`) under `extra`
/// config lines; returns the process's `cuKernelGetFunction` calls by result and the log.
fn lookups_by_result(extra: &str) -> (BTreeMap<String, u64>, String) {
    let (calls, log, _) = lookups_of(extra, &["lookup-memo"], "kernel-functions first=");
    (calls, log)
}

/// The process's `cuKernelGetFunction` rows as they happened (not the flight recorder's),
/// in order: (result, CUfunction made).
fn lookup_rows(data: &std::path::Path, pid: u32) -> Vec<Vec<String>> {
    duckdb(&format!(
        "select result_name, coalesce(cast(handle as varchar), 'null') \
         from read_parquet('{}/cuda/**/*.parquet', hive_partitioning = true) \
         where pid = {pid} and function = 'cuKernelGetFunction' \
         and flight_recorder is not true order by time_ns",
        data.display()
    ))
}

/// Runs the workload with `args` under `extra` config lines; its output must contain `done`.
/// Returns the calls by result, the log and the rows (`lookup_rows`).
fn lookups_of(
    extra: &str,
    args: &[&str],
    done: &str,
) -> (BTreeMap<String, u64>, String, Vec<Vec<String>>) {
    let fixtures = Fixtures::build();
    let data = data_dir();
    let config = fixtures.cuda_config(data.path(), r#"["default"]"#).replace(
        "stats = []\n",
        &format!("stats = [\"cuKernelGetFunction\"]\nstats_interval_secs = 1\n{extra}"),
    );
    let agent = Agent::start(&config, &[]);
    let (pid, stdout) =
        fixtures.run_workload(args, &[("FAKE_CUDA_RESULTS", "cuCtxSynchronize_v2=700")]);
    assert!(stdout.contains(done), "{stdout}");
    let stopped = agent.stop();
    assert!(stopped.status.success(), "{}", stopped.log);
    stopped.assert_nothing_lost("cuda", "cuda");
    let mut calls = BTreeMap::new();
    for row in stats_rows(&read_table(data.path(), "cuda_stats"))
        .iter()
        .filter(|r| r.pid == pid as i32 && r.function == "cuKernelGetFunction")
    {
        *calls.entry(row.result_name.clone()).or_insert(0u64) += row.calls;
    }
    let rows = lookup_rows(data.path(), pid);
    (calls, stopped.log, rows)
}

fn expected(pairs: &[(&str, u64)]) -> BTreeMap<String, u64> {
    pairs
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(r, n)| (r.to_string(), *n))
        .collect()
}

/// The agent's start log says how many lookups are attached with the session program.
fn assert_sessions(log: &str, on: bool) {
    let on = on && sessions_supported();
    let needle = if on {
        "repeat_lookups_at_entry=1"
    } else {
        "repeat_lookups_at_entry=0"
    };
    assert!(log.contains(needle), "{needle}: {log}");
    if !sessions_supported() {
        assert!(log.contains("uprobe.session needs Linux >= 6.13"), "{log}");
    }
}

/// 18 lookups in the first image, 5 after the exec. Probed (a result): each thread's first,
/// the first after this thread's set, push and pop, after an unload on another thread, after
/// a sticky error, and the exec'd image's first per kernel; the NULL out pointers always.
/// Counted at entry: the rest, including the other thread's lookup after the main thread's
/// context change and the one after a call that succeeded.
#[test]
fn repeats_are_counted_at_entry_until_something_changes_the_answer() {
    let _shared = support::shared();
    let (calls, log, rows) = lookups_of("", &["lookup-memo"], "kernel-functions first=");
    assert_sessions(&log, true);
    let mut want = split(10, 11);
    want.push(("CUDA_ERROR_INVALID_VALUE", 2));
    assert_eq!(calls, expected(&want));
    // Rows: the first image's one answer and its failure; the exec'd image's two answers (its
    // first kernel's answer has the same value as the first image's, and is a row again) and
    // its failure.
    let row = |result: &str, handle: &str| vec![result.to_string(), handle.to_string()];
    assert_eq!(
        rows,
        [
            row("CUDA_SUCCESS", "1795162113"),
            row("CUDA_ERROR_INVALID_VALUE", "null"),
            row("CUDA_SUCCESS", "1795162113"),
            row("CUDA_SUCCESS", "1795162369"),
            row("CUDA_ERROR_INVALID_VALUE", "null"),
        ]
    );
}

/// `repeat_lookups_at_entry = false`: every lookup keeps its return.
#[test]
fn the_setting_keeps_every_lookups_return() {
    let _shared = support::shared();
    let (calls, log) = lookups_by_result("repeat_lookups_at_entry = false\n");
    assert_sessions(&log, false);
    assert!(
        log.contains("reason=\"repeat_lookups_at_entry = false\""),
        "{log}"
    );
    assert_eq!(
        calls,
        expected(&[("CUDA_ERROR_INVALID_VALUE", 2), ("CUDA_SUCCESS", 21)])
    );
}

/// A function that changes answers left unprobed would make repeats wrong: none is skipped.
#[test]
fn an_unprobed_context_change_keeps_every_lookups_return() {
    let _shared = support::shared();
    let (calls, log) = lookups_by_result("exclude_functions = [\"cuCtxPushCurrent*\"]\n");
    assert_sessions(&log, false);
    assert!(
        !sessions_supported()
            || log.contains(
            "functions that change lookups' answers are not probed (or only at entry): [\\\"cuCtxPushCurrent_v2\\\"]"
        ),
        "{log}"
    );
    assert_eq!(
        calls,
        expected(&[("CUDA_ERROR_INVALID_VALUE", 2), ("CUDA_SUCCESS", 21)])
    );
}

/// Another thread's lookup answered while an unload runs (the stand-in holds it open) is not
/// trusted once the unload returns: the epoch moves at the unload's return as well as at its
/// entry. 4 lookups on that thread: its first, the one during the unload, the first after it
/// (all probed), and a repeat.
#[test]
fn a_lookup_that_overlaps_an_unload_is_asked_again_after_it() {
    let _shared = support::shared();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_str().expect("utf-8 temp dir");
    let (calls, log, _) = lookups_of(
        "",
        &["lookup-during-unload", path],
        "lookup-during-unload kernel=",
    );
    assert_sessions(&log, true);
    assert_eq!(calls, expected(&split(3, 1)));
}
