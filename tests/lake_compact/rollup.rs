//! The hourly roll-up of `cuda_stats` that `gpuship-lake compact` writes into
//! `cuda_stats_hourly/` and that `gpuship report` reads for the hours its range covers whole:
//! the report's numbers are those of the raw lake before, while and after a compaction killed at
//! each phase and rerun; a killed run's roll-up is deleted by the rerun; a lost roll-up file
//! falls back to the compacted rows; DuckDB, which knows no rule, reads the roll-up's calls equal
//! to the table's.

use std::path::Path;
use std::process::Command;

use gpuship_sinks::parquet::{FileOutcome, ParquetSinkConfig, PartitionedFiles};
use gpuship_sinks::schema::{CudaStatsBatchBuilder, CudaStatsRow, DurationBucket, DurationStats};
use gpuship_sinks::test_support::host_identity;
use gpuship_sinks::EventKind;

use super::fixture::{compact, hour_folder, hour_start, lake_binary, names, stderr};
use super::phases::paused_at;
use super::s3::{env as s3_env, upload, BUCKET};
use crate::support::lake::{duckdb, duckdb_s3};
use crate::support::peers::Moto;

const SECOND: i64 = 1_000_000_000;
const FUNCTIONS: [&str; 3] = [
    "cuLaunchKernel",
    "cuMemcpyHtoDAsync_v2",
    "cuStreamSynchronize",
];

/// The hours written (hours ago): closed, and whole in the report's range.
const HOURS: [i64; 2] = [4, 3];

/// A stats row of `function` for pid `pid` ending at `time_ns`, its numbers derived from `seed`
/// (calls, bytes, durations and a histogram of two buckets), every 7th sampled at a quarter.
fn stats_row(time_ns: i64, pid: i32, function: &str, seed: u64) -> CudaStatsRow {
    let calls = 10 + seed % 97;
    let (low, high) = (calls / 3, calls - calls / 3);
    CudaStatsRow {
        time_ns,
        interval_ns: 10 * SECOND as u64,
        pid,
        comm: format!("train-{}", seed % 2),
        function: function.into(),
        result: if seed.is_multiple_of(11) { 700 } else { 0 },
        result_name: if seed.is_multiple_of(11) {
            "CUDA_ERROR_ILLEGAL_ADDRESS".into()
        } else {
            "CUDA_SUCCESS".into()
        },
        calls,
        bytes_sum: (function != "cuLaunchKernel").then_some(seed * 4_096),
        durations: Some(DurationStats {
            sum_ns: low * 1_500 + high * 3_000 + seed,
            min_ns: 1_024,
            max_ns: 4_000 + seed,
            p50_ns: 2_500,
            p99_ns: 4_000,
            buckets: vec![
                DurationBucket {
                    from_ns: 1_024,
                    to_ns: 2_048,
                    calls: low,
                },
                DurationBucket {
                    from_ns: 2_048,
                    to_ns: 4_096 + seed,
                    calls: high,
                },
            ],
        }),
        workload: None,
        observed_fraction: if seed.is_multiple_of(7) { 0.25 } else { 1.0 },
    }
}

/// A lake of `cuda_stats` only (so its hours are the first the job works on): 2 hosts x 2
/// processes x 3 functions every 10 s for the first 20 minutes of each of [`HOURS`], in 3 files
/// per host and hour, as agents write them.
fn write_stats_lake(root: &Path) {
    let mut seed = 0u64;
    for host in 0..2 {
        let name = format!("gpu-node-{host:03}");
        let identity = host_identity(&name, "boot");
        let mut writer = PartitionedFiles::new(ParquetSinkConfig::with_path(root), &name);
        for ago in HOURS {
            let start = hour_start(ago);
            for file in 0..3i64 {
                let mut batch = CudaStatsBatchBuilder::new(identity.clone());
                for interval in (file * 40)..(file * 40 + 40) {
                    let end = start + (interval + 1) * 10 * SECOND;
                    for pid in [1_000 + host, 2_000 + host] {
                        for function in FUNCTIONS {
                            seed += 1;
                            batch.append(stats_row(end, pid, function, seed));
                        }
                    }
                }
                writer.write(EventKind::CudaStats, &batch.finish().expect("stats batch"));
                for outcome in writer.close_all() {
                    assert!(
                        matches!(outcome, FileOutcome::Finalized { .. }),
                        "{outcome:?}"
                    );
                }
            }
        }
    }
}

/// The report's numbers over `data` for `since..until` (hours ago, whole hours): the count
/// cards and the per-function table, as the page writes them.
fn report_numbers(data: &str, since_ago: i64, until_ago: i64, offset_ns: i64) -> String {
    report_numbers_with(data, (since_ago, until_ago, offset_ns), &[])
}

/// [`report_numbers`] with `env` (an S3 endpoint and keys).
fn report_numbers_with(
    data: &str,
    (since_ago, until_ago, offset_ns): (i64, i64, i64),
    env: &[(&str, String)],
) -> String {
    let since = chrono::DateTime::from_timestamp_nanos(hour_start(since_ago) + offset_ns);
    let until = chrono::DateTime::from_timestamp_nanos(hour_start(until_ago));
    let dir = tempfile::tempdir().expect("tempdir");
    let page = dir.path().join("page.html");
    let output = Command::new(lake_binary())
        .args(["report", "--data", data, "--since", &since.to_rfc3339()])
        .args(["--until", &until.to_rfc3339(), "-o"])
        .arg(&page)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .env_remove("RUST_LOG")
        .output()
        .expect("gpuship-lake report");
    assert!(output.status.success(), "{}", stderr(&output));
    let page = std::fs::read_to_string(&page).expect("page");
    let cards = &page[page.find("<div class=\"cards\">").expect("cards")..];
    let cards = &cards[..cards.find("</header>").expect("end of cards")];
    let functions = &page[page.find("<section id=\"functions\">").expect("functions")..];
    let functions = &functions[..functions.find("</section>").expect("end of functions")];
    assert!(
        functions.matches("<tr class=\"function\"").count() == FUNCTIONS.len(),
        "{functions}"
    );
    format!("{cards}\n{functions}")
}

/// The report over both hours whole.
fn whole_hours(data: &str) -> String {
    report_numbers(data, 4, 2, 0)
}

/// The roll-up files of hour `ago` on disk.
fn rollups(root: &Path, ago: i64) -> Vec<String> {
    names(&hour_folder(root, "cuda_stats_hourly", ago))
}

/// The roll-up files the markers of hour `ago` name.
fn named_rollups(root: &Path, ago: i64) -> Vec<String> {
    let mut named = Vec::new();
    for name in names(&hour_folder(root, "cuda_stats", ago)) {
        if name.starts_with("_compaction-") {
            let marker =
                std::fs::read(hour_folder(root, "cuda_stats", ago).join(&name)).expect("marker");
            let marker: serde_json::Value = serde_json::from_slice(&marker).expect("json");
            for rollup in marker["rollups"].as_array().expect("rollups") {
                named.push(rollup["name"].as_str().expect("name").to_string());
            }
        }
    }
    named.sort();
    named
}

/// `sum(calls)` and row counts DuckDB reads from the table's folders and from the roll-up's.
fn duckdb_calls(root: &Path) -> (Vec<String>, Vec<String>) {
    let sql = |table: &str| {
        format!(
            "SELECT count(*), sum(calls), sum(calls_estimated), sum(bytes_sum), \
             sum(duration_sum_ns), max(duration_max_ns) \
             FROM read_parquet('{}/{table}/**/*.parquet')",
            root.display()
        )
    };
    let raw = duckdb(&sql("cuda_stats")).remove(0);
    let rolled = duckdb(&sql("cuda_stats_hourly")).remove(0);
    (raw, rolled)
}

#[test]
fn the_report_reads_the_rollup_of_whole_hours_with_the_raw_lakes_numbers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    let data = root.display().to_string();
    write_stats_lake(root);
    let raw = whole_hours(&data);
    // A range that starts 10 minutes into the first hour: that hour is read row by row.
    let partial = report_numbers(&data, 4, 2, 600 * SECOND);
    assert_ne!(raw, partial, "the partial range counts fewer calls");

    let run = compact(&data, &["--retire-after", "0s"], &[]);
    assert!(run.status.success(), "{}", stderr(&run));
    for ago in HOURS {
        let files = rollups(root, ago);
        assert_eq!(files.len(), 1, "{files:?}");
        assert_eq!(files, named_rollups(root, ago));
    }
    assert_eq!(whole_hours(&data), raw, "from the roll-up");
    assert_eq!(report_numbers(&data, 4, 2, 600 * SECOND), partial);

    // Every interval row of a process, function and result added into one row per hour.
    let (table, rolled) = duckdb_calls(root);
    assert_eq!(
        table[0], "2880",
        "2 hours x 2 hosts x 2 processes x 3 functions x 120 rows"
    );
    assert_eq!(rolled[0], "48", "2 x 2 x 2 x 3 x 2 results");
    assert_eq!(table[1..], rolled[1..], "sums and maximum, read by DuckDB");

    // The report reads the roll-up, not the compacted rows, of a whole hour: with the
    // compacted file moved away, its numbers stay.
    let hour3 = hour_folder(root, "cuda_stats", 3);
    let compacted = names(&hour3)
        .into_iter()
        .find(|n| n.starts_with("compact-"))
        .expect("compacted file");
    let aside = root.join("aside.parquet");
    std::fs::rename(hour3.join(&compacted), &aside).expect("move");
    assert_eq!(whole_hours(&data), raw, "from the roll-up alone");
    std::fs::rename(&aside, hour3.join(&compacted)).expect("move back");

    // A lost roll-up file: the compacted rows are read instead, nothing is missing.
    let lost = hour_folder(root, "cuda_stats_hourly", 3).join(&rollups(root, 3)[0]);
    std::fs::remove_file(lost).expect("remove");
    assert_eq!(whole_hours(&data), raw, "without one roll-up file");
}

/// Kills the job paused at `phase` in the first `cuda_stats` hour, checks the report then and
/// after the kill and the rerun, and that the rerun leaves only roll-ups its markers name.
fn killed_at(phase: &str, rollup_files_then: usize) {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    let data = root.display().to_string();
    write_stats_lake(root);
    let before = whole_hours(&data);

    let mut child = paused_at(&data, phase, &["--upload-part-bytes", "4096"], &[]);
    let then = rollups(root, 4);
    assert_eq!(
        then.iter().filter(|n| n.ends_with(".parquet")).count(),
        rollup_files_then,
        "paused at {phase}: {then:?}"
    );
    assert_eq!(
        whole_hours(&data),
        before,
        "a report while paused at {phase}"
    );
    child.kill().expect("SIGKILL");
    child.wait().expect("reaped");
    assert_eq!(whole_hours(&data), before, "after the kill at {phase}");

    let rerun = compact(&data, &["--retire-after", "0s"], &[]);
    assert!(rerun.status.success(), "{}", stderr(&rerun));
    for ago in HOURS {
        let files = rollups(root, ago);
        assert_eq!(files.len(), 1, "{ago} h ago after the rerun: {files:?}");
        assert_eq!(files, named_rollups(root, ago), "no leftover");
    }
    assert_eq!(whole_hours(&data), before, "after the rerun");
    let (table, rolled) = duckdb_calls(root);
    assert_eq!(table[1..], rolled[1..], "the roll-up on disk, once");
}

#[test]
fn killed_after_planning_the_rollup_is_written_by_the_rerun() {
    killed_at("listed", 0);
}

#[test]
fn killed_while_writing_nothing_of_the_rollup_is_visible() {
    killed_at("writing", 0);
}

#[test]
fn killed_before_the_commit_the_complete_rollup_is_deleted_and_written_again() {
    killed_at("written", 1);
}

#[test]
fn killed_after_the_commit_the_rollup_is_kept() {
    killed_at("committed", 1);
}

#[test]
fn on_s3_a_killed_runs_rollup_is_replaced_and_the_report_reads_the_committed_one() {
    let moto = Moto::start(0);
    moto.create_bucket(BUCKET);
    let dir = tempfile::tempdir().expect("tempdir");
    write_stats_lake(dir.path());
    upload(&moto, dir.path());
    let env = s3_env(&moto);
    let data = format!("s3://{BUCKET}/fleet");
    let whole = (4, 2, 0);
    let before = report_numbers_with(&data, whole, &env);

    // Killed with its roll-up complete and not committed: readers do not count it.
    let mut child = paused_at(&data, "written", &[], &env);
    assert_eq!(
        report_numbers_with(&data, whole, &env),
        before,
        "while paused"
    );
    child.kill().expect("SIGKILL");
    child.wait().expect("reaped");
    let rerun = compact(&data, &["--retire-after", "0s"], &env);
    assert!(rerun.status.success(), "{}", stderr(&rerun));
    assert_eq!(
        report_numbers_with(&data, whole, &env),
        before,
        "after the rerun"
    );

    let endpoint = format!("127.0.0.1:{}", moto.port);
    let sql = |table: &str| {
        format!(
            "SELECT count(*), sum(calls), sum(duration_sum_ns) \
             FROM read_parquet('s3://{BUCKET}/fleet/{table}/**/*.parquet')"
        )
    };
    let table = duckdb_s3(&endpoint, &sql("cuda_stats")).remove(0);
    let rolled = duckdb_s3(&endpoint, &sql("cuda_stats_hourly")).remove(0);
    assert_eq!(table[0], "2880");
    assert_eq!(
        rolled[0], "48",
        "one roll-up per hour: the killed run's is gone"
    );
    assert_eq!(table[1..], rolled[1..]);
}
