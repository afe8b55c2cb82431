//! Repeated kernel lookups counted at entry without their return probe
//! (`bpf/include/cuda_lookup_memo.h`), on real eBPF with the stand-in library: which lookups
//! the kernel must still probe (a thread's first, and every one after its own context change,
//! an unload, a sticky error or an exec), and that the setting and an unprobed function that
//! changes answers turn it off.

use std::collections::BTreeMap;

use crate::support;
use crate::support::agent::{data_dir, Agent};
use crate::support::cuda_stats::stats_rows;
use crate::support::lake::read_table;
use crate::support::Fixtures;

/// Runs `cuda_workload lookup-memo` (which execs into `kernel-functions 2`) under `extra`
/// config lines; returns the process's `cuKernelGetFunction` calls by result and the log.
fn lookups_by_result(extra: &str) -> (BTreeMap<String, u64>, String) {
    let fixtures = Fixtures::build();
    let data = data_dir();
    let config = fixtures.cuda_config(data.path(), r#"["default"]"#).replace(
        "stats = []\n",
        &format!("stats = [\"cuKernelGetFunction\"]\nstats_interval_secs = 1\n{extra}"),
    );
    let agent = Agent::start(&config, &[]);
    let (pid, stdout) = fixtures.run_workload(
        &["lookup-memo"],
        &[("FAKE_CUDA_RESULTS", "cuCtxSynchronize_v2=700")],
    );
    assert!(stdout.contains("lookup-memo kernel="), "{stdout}");
    assert!(
        stdout.contains("kernel-functions first="),
        "the exec: {stdout}"
    );
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
    (calls, stopped.log)
}

fn expected(pairs: &[(&str, u64)]) -> BTreeMap<String, u64> {
    pairs.iter().map(|(r, n)| (r.to_string(), *n)).collect()
}

/// 18 lookups in the first image, 5 after the exec. Probed (a result): each thread's first,
/// the first after this thread's set, push and pop, after an unload on another thread, after
/// a sticky error, and the exec'd image's first per kernel; the NULL out pointers always.
/// Counted at entry: the rest, including the other thread's lookup after the main thread's
/// context change and the one after a call that succeeded.
#[test]
fn repeats_are_counted_at_entry_until_something_changes_the_answer() {
    let _shared = support::shared();
    let (calls, log) = lookups_by_result("");
    assert!(log.contains("repeat_lookups_at_entry=1"), "{log}");
    assert_eq!(
        calls,
        expected(&[
            ("CUDA_ERROR_INVALID_VALUE", 2),
            ("CUDA_SUCCESS", 10),
            ("NOT_CAPTURED", 11),
        ])
    );
}

/// `repeat_lookups_at_entry = false`: every lookup keeps its return.
#[test]
fn the_setting_keeps_every_lookups_return() {
    let _shared = support::shared();
    let (calls, log) = lookups_by_result("repeat_lookups_at_entry = false\n");
    assert!(log.contains("repeat_lookups_at_entry=0"), "{log}");
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
    assert!(log.contains("repeat_lookups_at_entry=0"), "{log}");
    assert!(
        log.contains(
            "functions that change lookups' answers are not probed: [\\\"cuCtxPushCurrent_v2\\\"]"
        ),
        "{log}"
    );
    assert_eq!(
        calls,
        expected(&[("CUDA_ERROR_INVALID_VALUE", 2), ("CUDA_SUCCESS", 21)])
    );
}
