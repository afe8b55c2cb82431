//! `cuKernelGetFunction` in `stats` mode, on real eBPF with the stand-in library: the first
//! answer per (process, kernel) is a row that names the launches, the repeats are only counted
//! in `cuda_stats` (at entry, without their return probe), and a failed lookup is a row.

use std::collections::BTreeMap;

use crate::kernel_names::{rows, text};
use crate::support;
use crate::support::agent::{data_dir, Agent};
use crate::support::cuda_stats::stats_rows;
use crate::support::lake::read_table;
use crate::support::Fixtures;

/// The CUDA 13 runtime asks `cuKernelGetFunction` for the same kernels on every training step.
/// In `stats` mode the first answer per (process, kernel) is still a row (it names the
/// launches through that function), the repeats are only counted, and a failure is a row.
#[test]
fn repeated_function_lookups_are_counted_and_only_new_answers_are_rows() {
    let _shared = support::shared();
    let fixtures = Fixtures::build();
    let data = data_dir();
    let config = fixtures.cuda_config(data.path(), r#"["default"]"#).replace(
        "stats = []\n",
        "stats = [\"cuKernelGetFunction\"]\nstats_interval_secs = 1\n",
    );
    let agent = Agent::start(&config, &[]);
    let (pid, stdout) = fixtures.run_workload(&["kernel-functions", "500"], &[]);
    assert!(stdout.contains("calls=1006"), "{stdout}");
    let stopped = agent.stop();
    assert!(stopped.status.success(), "{}", stopped.log);
    // Rows: the load, two gets, each kernel's first answer, the failure, two launches.
    assert_eq!(stopped.assert_nothing_lost("cuda", "cuda"), 8);
    let ring = stopped.ring("cuda");
    assert_eq!(ring["aggregated"], 1001, "{}", stopped.outcome);
    assert_eq!(ring["aggregated_received"], 1001, "{}", stopped.outcome);
    assert_eq!(ring["unknown_kernel_launches"], 0, "{}", stopped.outcome);
    assert_eq!(
        stopped.outcome["summary"]["calls"]["cuKernelGetFunction"], 1001,
        "{}",
        stopped.outcome
    );

    let (first, second, f, g) = ("1795162112", "1795162368", "1795162113", "1795162369");
    let ok = "CUDA_SUCCESS";
    let expected: Vec<Vec<Option<String>>> = vec![
        text(&[
            "cuLibraryLoadData",
            ok,
            "19712",
            "null",
            "null",
            "null",
            "null",
        ]),
        text(&[
            "cuLibraryGetKernel",
            ok,
            first,
            "19712",
            "_Z5firstv",
            "first()",
            "null",
        ]),
        text(&[
            "cuLibraryGetKernel",
            ok,
            second,
            "19712",
            "_Z6secondv",
            "second()",
            "null",
        ]),
        text(&[
            "cuKernelGetFunction",
            ok,
            f,
            first,
            "_Z5firstv",
            "first()",
            "null",
        ]),
        text(&[
            "cuKernelGetFunction",
            ok,
            g,
            second,
            "_Z6secondv",
            "second()",
            "null",
        ]),
        // A failed lookup names nothing (it made no function).
        text(&[
            "cuKernelGetFunction",
            "CUDA_ERROR_INVALID_VALUE",
            "null",
            first,
            "null",
            "null",
            "null",
        ]),
        text(&["cuLaunchKernel", ok, f, "null", "_Z5firstv", "first()", "1"]),
        text(&[
            "cuLaunchKernel",
            ok,
            g,
            "null",
            "_Z6secondv",
            "second()",
            "2",
        ]),
    ];
    assert_eq!(rows(data.path(), pid), expected);

    let stats = stats_rows(&read_table(data.path(), "cuda_stats"));
    let mut calls = BTreeMap::new();
    for row in stats.iter().filter(|r| r.pid == pid as i32) {
        *calls
            .entry((row.function.clone(), row.result_name.clone()))
            .or_insert(0u64) += row.calls;
    }
    // Each kernel's first lookup is probed whole; its 499 repeats on the same thread, in the
    // same context, are counted at entry without their return (tests/lookup_memo.rs; every
    // lookup is probed on a kernel without uprobe.session).
    let mut want = crate::lookup_memo::split(2, 998);
    want.push(("CUDA_ERROR_INVALID_VALUE", 1));
    let expected_calls: BTreeMap<(String, String), u64> = want
        .into_iter()
        .map(|(r, n)| (("cuKernelGetFunction", r), n))
        .map(|((f, r), n)| ((f.to_string(), r.to_string()), n))
        .collect();
    assert_eq!(calls, expected_calls);
}
