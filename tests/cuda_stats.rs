//! Real eBPF, `stats` mode: calls of the functions in `[sources.cuda] stats` are added up in
//! the kernel and shipped as `cuda_stats` rows per interval; their failures (and slow calls)
//! are rows as well; every aggregated call is accounted for, including the ones a full table
//! refuses; `gpuship run -- COMMAND` ignores the mode. Through Kafka and OTLP:
//! tests/cuda_stats_peers.rs.

use std::collections::BTreeMap;

use crate::support;
use crate::support::agent::{data_dir, Agent};
use crate::support::cuda_rows::rows;
use crate::support::cuda_stats::{
    assert_durations_consistent, stats_config, stats_rows, totals, StatsRow,
};
use crate::support::lake::{duckdb, read_table};
use crate::support::Fixtures;

/// Calls of one `cuda_workload sequence` iteration that the default functions probe.
const SEQUENCE_CALLS: u64 = 28;

#[test]
fn aggregated_calls_come_out_as_exact_statistics_and_failures_stay_rows() {
    let _shared = support::shared();
    let fixtures = Fixtures::build();
    let data = data_dir();
    // The flight recorder's rows around the sticky failures are tests/flight_recorder.rs's.
    let config = stats_config(
        &fixtures,
        data.path(),
        "stats_interval_secs = 1\nflight_recorder_slots_per_cpu = 0\n",
    );
    let agent = Agent::start(&config, &[]);
    let (pid, stdout) = fixtures.run_workload(
        &["sequence", "3"],
        &[("FAKE_CUDA_RESULTS", "cuCtxSynchronize=700")],
    );
    assert_eq!(stdout.trim(), "workload: sequence iterations=3 calls=90");
    // (90 calls made; cuDriverGetVersion and cuDeviceGetCount are not default functions.)
    let stopped = agent.stop();
    assert!(stopped.status.success(), "{}", stopped.log);

    // Per iteration: 2 cuMemAlloc_v2 (one OOM), 3 launches, 1 failing cuCtxSynchronize are
    // aggregated; the OOM and the 700 are rows too.
    let per_iteration_rows = SEQUENCE_CALLS - 6 + 2;
    assert_eq!(
        stopped.assert_nothing_lost("cuda", "cuda"),
        3 * per_iteration_rows
    );
    let ring = stopped.ring("cuda");
    assert_eq!(ring["aggregated"], 18, "{}", stopped.outcome);
    assert_eq!(ring["aggregated_received"], 18, "{}", stopped.outcome);
    assert_eq!(ring["aggregated_pending"], 0, "{}", stopped.outcome);
    assert_eq!(ring["stats_full"], 0, "{}", stopped.outcome);
    let sink = stopped.sink("cuda_stats");
    assert_eq!(sink["delivered"], sink["received"], "{}", stopped.outcome);
    assert_eq!(sink["dropped"], 0, "{}", stopped.outcome);
    // The run's summary counts every call once, aggregated or a row.
    let summary = &stopped.outcome["summary"];
    for (function, calls) in [
        ("cuLaunchKernel", 3),
        ("cuLaunchKernelEx", 3),
        ("cuMemAlloc_v2", 6),
        ("cuCtxSynchronize", 3),
        ("cuMemFree_v2", 6),
    ] {
        assert_eq!(summary["calls"][function], calls, "{function}: {summary}");
    }
    assert_eq!(
        summary["failures"]["cuMemAlloc_v2 CUDA_ERROR_OUT_OF_MEMORY"], 3,
        "{summary}"
    );
    assert_eq!(
        summary["bytes_allocated"].as_u64(),
        Some(3 * 1_048_576 + 3 * 4096 + 3 * 65_536),
        "{summary}"
    );

    let stats = stats_rows(&read_table(data.path(), "cuda_stats"));
    assert!(stats.iter().all(|r| r.pid == pid as i32), "{stats:?}");
    let expected: BTreeMap<(String, String), (u64, Option<u64>)> = [
        (
            ("cuCtxSynchronize", "CUDA_ERROR_ILLEGAL_ADDRESS"),
            (3, None),
        ),
        (("cuLaunchKernel", "CUDA_SUCCESS"), (3, None)),
        (("cuLaunchKernelEx", "CUDA_SUCCESS"), (3, None)),
        (("cuLaunchKernel_ptsz", "CUDA_SUCCESS"), (3, None)),
        (
            ("cuMemAlloc_v2", "CUDA_ERROR_OUT_OF_MEMORY"),
            (3, Some(3 << 40)),
        ),
        (("cuMemAlloc_v2", "CUDA_SUCCESS"), (3, Some(3 * 1_048_576))),
    ]
    .into_iter()
    .map(|((f, r), v)| ((f.to_string(), r.to_string()), v))
    .collect();
    assert_eq!(totals(&stats, pid), expected);
    for row in &stats {
        assert_durations_consistent(row);
        assert_eq!(
            row.result == 0,
            row.result_name == "CUDA_SUCCESS",
            "{row:?}"
        );
        assert!(
            (900_000_000..=2_000_000_000).contains(&row.interval_ns)
                || row.interval_ns < 1_000_000_000,
            "intervals of about a second, the last one cut at stop: {row:?}"
        );
    }

    // The rows: everything but the aggregated successes.
    let calls = rows(&read_table(data.path(), "cuda"));
    let launches = calls
        .iter()
        .filter(|r| r.call.function.starts_with("cuLaunchKernel"))
        .count();
    assert_eq!(launches, 0, "launches are statistics only");
    let failed: Vec<(String, u32)> = calls
        .iter()
        .filter(|r| r.call.result != 0)
        .map(|r| (r.call.function.clone(), r.call.result))
        .collect();
    let expected_failed: Vec<(String, u32)> = (0..3)
        .flat_map(|_| {
            [
                ("cuMemAlloc_v2".to_string(), 2),
                ("cuCtxSynchronize".to_string(), 700),
            ]
        })
        .collect();
    assert_eq!(failed, expected_failed);

    // DuckDB reads the statistics, histogram included, as a user would.
    let glob = format!("{}/cuda_stats/**/*.parquet", data.path().display());
    let answer = duckdb(&format!(
        "select function, sum(calls), sum(calls_in_buckets) from ( \
           select function, calls, \
             (select sum(b.calls) from (select unnest(duration_buckets) as b)) as calls_in_buckets \
           from read_parquet('{glob}', hive_partitioning=true) \
           where function like 'cuLaunchKernel%') \
         group by function order by function"
    ));
    let expected: Vec<Vec<String>> = ["cuLaunchKernel", "cuLaunchKernelEx", "cuLaunchKernel_ptsz"]
        .iter()
        .map(|f| vec![f.to_string(), "3".into(), "3".into()])
        .collect();
    assert_eq!(answer, expected);

    // `gpuship query` (the lake's engine, on its own arrow) reads the table too, every row
    // with its histogram.
    let output = std::process::Command::new(crate::support::agent::binary())
        .args([
            "query",
            "SELECT function, result_name, sum(calls) AS calls, \
             count(duration_buckets) = count(*) AS histogram \
             FROM cuda_stats GROUP BY 1, 2 ORDER BY 1, 2",
            "--since",
            "1h",
            "--format",
            "csv",
            "--data",
        ])
        .arg(data.path())
        .output()
        .expect("gpuship query runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        "function,result_name,calls,histogram\n\
         cuCtxSynchronize,CUDA_ERROR_ILLEGAL_ADDRESS,3,true\n\
         cuLaunchKernel,CUDA_SUCCESS,3,true\n\
         cuLaunchKernelEx,CUDA_SUCCESS,3,true\n\
         cuLaunchKernel_ptsz,CUDA_SUCCESS,3,true\n\
         cuMemAlloc_v2,CUDA_ERROR_OUT_OF_MEMORY,3,true\n\
         cuMemAlloc_v2,CUDA_SUCCESS,3,true\n"
    );
}

#[test]
fn calls_spread_over_intervals_are_each_counted_once() {
    let _shared = support::shared();
    let fixtures = Fixtures::build();
    let data = data_dir();
    let config = stats_config(&fixtures, data.path(), "stats_interval_secs = 1\n");
    let agent = Agent::start(&config, &[]);
    // 6,000 launches, 400 ms of sleep after every 1,000: about 2.4 s, two or more intervals.
    let (pid, stdout) = fixtures.run_workload(&["launches", "6000", "400000"], &[]);
    assert_eq!(stdout.trim(), "workload: launches calls=6000");
    let stopped = agent.stop();
    assert!(stopped.status.success(), "{}", stopped.log);
    let ring = stopped.ring("cuda");
    assert_eq!(ring["aggregated"], 6000, "{}", stopped.outcome);
    assert_eq!(ring["aggregated_received"], 6000, "{}", stopped.outcome);
    assert_eq!(ring["received"], 0, "no rows: {}", stopped.outcome);

    let stats = stats_rows(&read_table(data.path(), "cuda_stats"));
    let ours: Vec<&StatsRow> = stats.iter().filter(|r| r.pid == pid as i32).collect();
    assert!(ours.len() >= 2, "one row per interval: {ours:?}");
    assert_eq!(ours.iter().map(|r| r.calls).sum::<u64>(), 6000);
    assert!(ours.iter().all(|r| r.function == "cuLaunchKernel"));
    for row in &ours {
        assert_durations_consistent(row);
    }
}

#[test]
fn entry_only_statistics_count_calls_without_durations() {
    let _shared = support::shared();
    let fixtures = Fixtures::build();
    let data = data_dir();
    let config = stats_config(&fixtures, data.path(), "").replace(
        "[sources.cuda]\n",
        "[sources.cuda]\nentry_only = [\"cuLaunchKernelEx\"]\n",
    );
    let agent = Agent::start(&config, &[]);
    let (pid, _) = fixtures.run_workload(&["sequence", "2"], &[]);
    let stopped = agent.stop();
    assert!(stopped.status.success(), "{}", stopped.log);
    let stats = stats_rows(&read_table(data.path(), "cuda_stats"));
    let entry_only: Vec<&StatsRow> = stats
        .iter()
        .filter(|r| r.pid == pid as i32 && r.function == "cuLaunchKernelEx")
        .collect();
    assert_eq!(entry_only.len(), 1, "{entry_only:?}");
    let row = entry_only[0];
    assert_eq!(
        (row.calls, row.result, row.result_name.as_str()),
        (2, 0, "NOT_CAPTURED")
    );
    assert!(row.durations.is_none(), "{row:?}");
}

#[test]
fn a_full_statistics_table_counts_what_it_refuses_and_slow_calls_are_rows_too() {
    let _shared = support::shared();
    let fixtures = Fixtures::build();
    let data = data_dir();
    // One entry per interval: the first (process, function, result) of the interval gets it,
    // the others are counted as stats_full. Every call takes over 1 ns: all are rows too.
    let config = stats_config(
        &fixtures,
        data.path(),
        "stats_max_entries = 1\nslow_call_ns = 1\nstats_interval_secs = 3600\n",
    );
    let agent = Agent::start(&config, &[]);
    let (pid, _) = fixtures.run_workload(&["sequence", "2"], &[]);
    let stopped = agent.stop();
    assert!(stopped.status.success(), "{}", stopped.log);
    assert_eq!(
        stopped.assert_nothing_lost("cuda", "cuda"),
        2 * SEQUENCE_CALLS
    );
    let ring = stopped.ring("cuda");
    let aggregated = ring["aggregated"].as_u64().unwrap();
    let full = ring["stats_full"].as_u64().unwrap();
    assert_eq!(aggregated + full, 12, "{}", stopped.outcome);
    assert_eq!(
        ring["aggregated_received"], ring["aggregated"],
        "{}",
        stopped.outcome
    );
    let stats = stats_rows(&read_table(data.path(), "cuda_stats"));
    assert_eq!(stats.len(), 1, "{stats:?}");
    assert_eq!(stats[0].calls, aggregated);
    assert_eq!(stats[0].pid, pid as i32);
    // The log says so.
    assert!(
        stopped.log.contains(&format!("stats_full={full}")),
        "{}",
        stopped.log
    );
}

#[test]
fn tracing_one_command_ignores_stats_and_records_every_call() {
    let _shared = support::shared();
    let fixtures = Fixtures::build();
    let data = data_dir();
    let config = stats_config(&fixtures, data.path(), "");
    let workload = fixtures
        .workload
        .to_str()
        .expect("a UTF-8 path")
        .to_string();
    let libcuda = fixtures.libcuda.to_str().expect("a UTF-8 path").to_string();
    let agent = Agent::start_with_env(
        &config,
        &["--", &workload, "sequence", "1"],
        &[("CUDA_LIB", &libcuda)],
    );
    let stopped = agent.wait();
    assert!(stopped.status.success(), "{}", stopped.log);
    assert!(
        stopped.log.contains("[sources.cuda] stats is ignored"),
        "{}",
        stopped.log
    );
    assert_eq!(stopped.assert_nothing_lost("cuda", "cuda"), SEQUENCE_CALLS);
    assert_eq!(stopped.ring("cuda")["aggregated"], 0);
    assert!(read_table(data.path(), "cuda_stats").is_empty());
}
