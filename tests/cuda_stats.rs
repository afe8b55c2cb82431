//! Real eBPF, `stats` mode: calls of the functions in `[sources.cuda] stats` are added up in
//! the kernel and shipped as `cuda_stats` rows per interval; their failures (and slow calls)
//! are rows as well; every aggregated call is accounted for, including the ones a full table
//! refuses; `gpuship run -- COMMAND` ignores the mode.

use std::collections::BTreeMap;

use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, UInt32Type, UInt64Type};
use arrow_array::{Array, RecordBatch};

use crate::support;
use crate::support::agent::{data_dir, Agent};
use crate::support::cuda_rows::rows;
use crate::support::lake::{duckdb, read_table};
use crate::support::Fixtures;

/// One `cuda_stats` row, as read back.
#[derive(Debug, Clone)]
struct StatsRow {
    pid: i32,
    function: String,
    result: u32,
    result_name: String,
    interval_ns: u64,
    calls: u64,
    bytes_sum: Option<u64>,
    durations: Option<Durations>,
}

/// The duration columns of a row.
#[derive(Debug, Clone)]
struct Durations {
    sum: u64,
    min: u64,
    max: u64,
    p50: u64,
    p99: u64,
    /// (from_ns, to_ns, calls) of each bucket.
    buckets: Vec<(u64, u64, u64)>,
}

fn stats_rows(batches: &[RecordBatch]) -> Vec<StatsRow> {
    let mut out = Vec::new();
    for batch in batches {
        let u64s = |name: &str| batch[name].as_primitive::<UInt64Type>().clone();
        let text = |name: &str| batch[name].as_string::<i32>().clone();
        let (function, result_name) = (text("function"), text("result_name"));
        let pid = batch["pid"].as_primitive::<Int32Type>().clone();
        let result = batch["result"].as_primitive::<UInt32Type>().clone();
        let (interval, calls, bytes) = (u64s("interval_ns"), u64s("calls"), u64s("bytes_sum"));
        let (sum, min, max) = (
            u64s("duration_sum_ns"),
            u64s("duration_min_ns"),
            u64s("duration_max_ns"),
        );
        let (p50, p99) = (u64s("duration_p50_ns"), u64s("duration_p99_ns"));
        let buckets = batch["duration_buckets"].as_list::<i32>().clone();
        for row in 0..batch.num_rows() {
            let durations = (!sum.is_null(row)).then(|| {
                let list = buckets.value(row);
                let list = list.as_struct();
                let column = |i: usize| list.column(i).as_primitive::<UInt64Type>().clone();
                let (from, to, n) = (column(0), column(1), column(2));
                let buckets = (0..list.len())
                    .map(|i| (from.value(i), to.value(i), n.value(i)))
                    .collect();
                Durations {
                    sum: sum.value(row),
                    min: min.value(row),
                    max: max.value(row),
                    p50: p50.value(row),
                    p99: p99.value(row),
                    buckets,
                }
            });
            out.push(StatsRow {
                pid: pid.value(row),
                function: function.value(row).to_string(),
                result: result.value(row),
                result_name: result_name.value(row).to_string(),
                interval_ns: interval.value(row),
                calls: calls.value(row),
                bytes_sum: (!bytes.is_null(row)).then(|| bytes.value(row)),
                durations,
            });
        }
    }
    out
}

/// Calls and bytes per (function, result name) of `pid`, over every interval.
fn totals(rows: &[StatsRow], pid: u32) -> BTreeMap<(String, String), (u64, Option<u64>)> {
    let mut totals = BTreeMap::new();
    for row in rows.iter().filter(|r| r.pid == pid as i32) {
        let entry = totals
            .entry((row.function.clone(), row.result_name.clone()))
            .or_insert((0, None));
        entry.0 += row.calls;
        if let Some(bytes) = row.bytes_sum {
            entry.1 = Some(entry.1.unwrap_or(0) + bytes);
        }
    }
    totals
}

/// Durations are consistent: the buckets hold every timed call, the extremes lie in the first
/// and last bucket, and min <= p50 <= p99 <= max, sum within [calls * min, calls * max].
fn assert_durations_consistent(row: &StatsRow) {
    let Some(Durations {
        sum,
        min,
        max,
        p50,
        p99,
        buckets,
    }) = &row.durations
    else {
        panic!("{row:?}: no durations")
    };
    let in_buckets: u64 = buckets.iter().map(|b| b.2).sum();
    assert_eq!(in_buckets, row.calls, "{row:?}");
    assert!(min <= p50 && p50 <= p99 && p99 <= max, "{row:?}");
    assert!(*min > 0, "{row:?}");
    assert!(
        *sum >= row.calls * min && *sum <= row.calls * max,
        "{row:?}"
    );
    let (first, last) = (buckets[0], buckets[buckets.len() - 1]);
    assert!(first.0 <= *min && *min < first.1, "{row:?}");
    assert!(last.0 <= *max && *max < last.1, "{row:?}");
    assert!(buckets.windows(2).all(|w| w[0].1 <= w[1].0), "{row:?}");
}

fn stats_config(fixtures: &Fixtures, data: &std::path::Path, extra: &str) -> String {
    fixtures.cuda_config(data, r#"["default"]"#).replace(
        "stats = []\n",
        &format!("stats = [\"cuLaunchKernel*\", \"cuMemAlloc_v2\", \"cuCtxSynchronize\"]\n{extra}"),
    )
}

/// Calls of one `cuda_workload sequence` iteration that the default functions probe.
const SEQUENCE_CALLS: u64 = 28;

#[test]
fn aggregated_calls_come_out_as_exact_statistics_and_failures_stay_rows() {
    let _shared = support::shared();
    let fixtures = Fixtures::build();
    let data = data_dir();
    let config = stats_config(&fixtures, data.path(), "stats_interval_secs = 1\n");
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

#[test]
fn statistics_reach_kafka_and_the_collector_as_their_own_kind() {
    let _alone = support::exclusive();
    let tansu = support::peers::Tansu::start(0);
    let rotel = support::peers::Rotel::start(0, 0);
    let brokers = tansu.brokers();
    let fixtures = Fixtures::build();
    let data = data_dir();
    let mut config = stats_config(&fixtures, data.path(), "stats_interval_secs = 1\n");
    config += &format!(
        "\n[[sinks]]\ntype = \"kafka\"\nname = \"kafka\"\nbrokers = \"{brokers}\"\n\
         topic = \"k.{{kind}}\"\nencoding = \"json\"\n\
         \n[[sinks]]\ntype = \"otlp\"\nname = \"otlp\"\nendpoint = \"http://127.0.0.1:{}\"\n\
         protocol = \"grpc\"\nkinds = [\"cuda_stats\"]\n",
        rotel.grpc_port
    );
    let agent = Agent::start(&config, &[]);
    let (pid, _) = fixtures.run_workload(&["sequence", "2"], &[]);
    let stopped = agent.stop();
    assert!(stopped.status.success(), "{}", stopped.log);
    let lake_rows = stopped.sink_named("parquet", "cuda_stats")["delivered"]
        .as_u64()
        .unwrap();
    assert!(lake_rows >= 4, "{}", stopped.outcome);
    for sink in ["kafka", "otlp"] {
        let counters = stopped.sink_named(sink, "cuda_stats");
        assert_eq!(counters["received"], lake_rows, "{sink}: {counters}");
        assert_eq!(counters["delivered"], lake_rows, "{sink}: {counters}");
    }

    // Kafka: one JSON message per row on the kind's own topic, the histogram as objects.
    let messages = crate::support::kafka::consume_all(&brokers, "k.cuda_stats", lake_rows as usize);
    assert_eq!(messages.len() as u64, lake_rows, "exactly once");
    let mut calls: BTreeMap<String, u64> = BTreeMap::new();
    for message in &messages {
        let row: serde_json::Value = serde_json::from_slice(&message.payload).unwrap();
        assert_eq!(row["pid"], pid);
        assert_eq!(message.headers["kind"], "cuda_stats");
        *calls
            .entry(row["function"].as_str().unwrap().to_string())
            .or_default() += row["calls"].as_u64().unwrap();
        let buckets = row["duration_buckets"].as_array().expect("buckets");
        let in_buckets: u64 = buckets.iter().map(|b| b["calls"].as_u64().unwrap()).sum();
        assert_eq!(in_buckets, row["calls"].as_u64().unwrap(), "{row}");
        assert!(buckets
            .iter()
            .all(|b| b["from_ns"].as_u64() < b["to_ns"].as_u64()));
    }
    let expected: BTreeMap<String, u64> = [
        ("cuCtxSynchronize", 2),
        ("cuLaunchKernel", 2),
        ("cuLaunchKernelEx", 2),
        ("cuLaunchKernel_ptsz", 2),
        ("cuMemAlloc_v2", 4),
    ]
    .into_iter()
    .map(|(f, n)| (f.to_string(), n))
    .collect();
    assert_eq!(calls, expected);

    // OTLP: one log record per row, named and counted.
    let records = rotel.wait_for_records(lake_rows as usize, std::time::Duration::from_secs(20));
    let stats: Vec<_> = records
        .iter()
        .filter(|r| r.event_name == "cuda.call.stats")
        .collect();
    assert_eq!(stats.len() as u64, lake_rows, "{records:#?}");
    let mut otlp_calls: BTreeMap<String, u64> = BTreeMap::new();
    for record in &stats {
        let function = record.attributes["cuda.function"]
            .trim_start_matches("Str(")
            .trim_end_matches(')')
            .to_string();
        let n: u64 = record.attributes["cuda.stats.calls"]
            .trim_start_matches("Int(")
            .trim_end_matches(')')
            .parse()
            .unwrap();
        *otlp_calls.entry(function).or_default() += n;
        assert!(record.body.contains(" times in "), "{record:?}");
    }
    assert_eq!(otlp_calls, expected);
    let failing = stats.iter().filter(|r| r.severity_text == "WARN").count();
    assert!(failing >= 1, "the OOM allocations' row is WARN: {stats:#?}");
}
