//! Lakes for the compaction tests, written with the Parquet sink's own writer as agents write
//! them, and the checksums that prove every row is there exactly once: through gpuship's
//! readers (`gpuship-lake query`) and through DuckDB, which globs the folders without any rule.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use gpuship_sinks::parquet::{FileOutcome, ParquetSinkConfig, PartitionedFiles};
use gpuship_sinks::schema::{xid_batch_of, CudaBatchBuilder, CudaRow};
use gpuship_sinks::test_support::{cuda_row, host_identity, xid_record};
use gpuship_sinks::EventKind;

use crate::support::agent::binary;

const HOUR_NS: i64 = 3_600_000_000_000;

/// The `gpuship-lake` binary cargo built beside `gpuship`.
pub fn lake_binary() -> PathBuf {
    Path::new(binary()).with_file_name("gpuship-lake")
}

/// The start of the hour `hours_ago` hours before the current one, in ns.
pub fn hour_start(hours_ago: i64) -> i64 {
    let now = chrono::Utc::now().timestamp_nanos_opt().expect("now");
    (now / HOUR_NS - hours_ago) * HOUR_NS
}

/// A lake of `hosts` hosts, each writing `files` files per hour of `hours` (hours ago) into
/// `cuda` (`rows` rows a file, times interleaved across files so sorting matters) and `xid`
/// (one row a file), through the sink's writer as agents do. Times are unique per row.
pub fn write_lake(root: &Path, hosts: usize, hours: &[i64], files: usize, rows: usize) {
    for host in 0..hosts {
        let name = format!("gpu-node-{host:03}");
        let identity = host_identity(&name, "boot");
        let mut writer = PartitionedFiles::new(ParquetSinkConfig::with_path(root), &name);
        for &ago in hours {
            let start = hour_start(ago);
            for file in 0..files {
                let mut cuda = CudaBatchBuilder::new(identity.clone(), rows);
                for i in 0..rows {
                    cuda.append(&CudaRow {
                        time_ns: start + ((i * files + file) * 1_000 + host) as i64,
                        pid: 1_000 + host as i32,
                        tid: file as i32,
                        function: ["cuMemAlloc_v2", "cuLaunchKernel", "cuMemFree_v2"][i % 3],
                        bytes: Some(i as u64 * 7),
                        ..cuda_row()
                    });
                }
                writer.write(EventKind::Cuda, &cuda.finish().expect("cuda batch"));
                let xid = xid_record(79 + file as u32, "0000:3b:00.0", "fell off the bus");
                let xid = gpuship_sinks::schema::XidRecord {
                    time_ns: start + 900_000_000_000 + (file * 1_000 + host) as i64,
                    ..xid
                };
                writer.write(
                    EventKind::Xid,
                    &xid_batch_of(&identity, &[xid]).expect("xid"),
                );
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

/// Per-table checksums: count, distinct times and sums of every column kind the tables hold.
pub const SUMS: [(&str, &str); 2] = [
    (
        "cuda",
        "count(*), count(DISTINCT time_ns), sum(time_ns % 1000000007), sum(pid), sum(tid), sum(bytes), \
         sum(length(host)), sum(length(function))",
    ),
    (
        "xid",
        "count(*), count(DISTINCT time_ns), sum(time_ns % 1000000007), sum(code), sum(length(message))",
    ),
];

/// The checksums as gpuship's readers see the lake at `data` (a folder or `s3://`), with `env`.
pub fn lake_sums(data: &str, env: &[(&str, String)]) -> Vec<Vec<i128>> {
    lake_sums_with(data, env, &[])
}

/// [`lake_sums`] with more `gpuship-lake query` arguments (`--iceberg`).
pub fn lake_sums_with(data: &str, env: &[(&str, String)], extra: &[&str]) -> Vec<Vec<i128>> {
    let since = chrono::DateTime::from_timestamp_nanos(hour_start(30)).to_rfc3339();
    let until = chrono::DateTime::from_timestamp_nanos(hour_start(-2)).to_rfc3339();
    SUMS.iter()
        .map(|(table, columns)| {
            let sql = format!("SELECT {columns} FROM {table}");
            let output = Command::new(lake_binary())
                .args([
                    "query", &sql, "--format", "csv", "--since", &since, "--until", &until,
                ])
                .args(["--data", data])
                .args(extra)
                .envs(env.iter().map(|(k, v)| (k, v)))
                .env_remove("RUST_LOG")
                .output()
                .expect("gpuship-lake query");
            assert!(output.status.success(), "{sql}: {}", stderr(&output));
            let text = String::from_utf8_lossy(&output.stdout).into_owned();
            let line = text
                .lines()
                .nth(1)
                .unwrap_or_else(|| panic!("no row: {text}"));
            numbers(line.split(','))
        })
        .collect()
}

/// The checksums DuckDB computes over every `*.parquet` under `glob_root` (no rule: what an
/// engine that globs the folders sees).
pub fn duckdb_sums(glob_root: &str, run: impl Fn(&str) -> Vec<Vec<String>>) -> Vec<Vec<i128>> {
    SUMS.iter()
        .map(|(table, columns)| {
            let sql = format!(
                "SELECT {columns} FROM read_parquet('{glob_root}/{table}/**/*.parquet', \
                 union_by_name = true)"
            );
            numbers(run(&sql)[0].iter().map(String::as_str))
        })
        .collect()
}

fn numbers<'a>(values: impl Iterator<Item = &'a str>) -> Vec<i128> {
    values
        .map(|v| {
            v.trim()
                .parse()
                .unwrap_or_else(|_| panic!("not a number: {v:?}"))
        })
        .collect()
}

pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Runs `gpuship-lake compact --data <data> <args>` to its end.
pub fn compact(data: &str, args: &[&str], env: &[(&str, String)]) -> Output {
    Command::new(lake_binary())
        .args(["compact", "--data", data])
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .env_remove("RUST_LOG")
        .output()
        .expect("gpuship-lake compact")
}

/// Names in `folder`, sorted.
pub fn names(folder: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(folder)
        .map(|entries| {
            entries
                .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// The folder of `table`'s hour `hours_ago` under `root`.
pub fn hour_folder(root: &Path, table: &str, hours_ago: i64) -> PathBuf {
    let start = chrono::DateTime::from_timestamp_nanos(hour_start(hours_ago));
    root.join(format!(
        "{table}/dt={}/hour={}",
        start.format("%Y-%m-%d"),
        start.format("%H")
    ))
}

/// Every closed hour of `hours` holds one compacted file and its marker, nothing else.
pub fn assert_compacted(root: &Path, hours: &[i64]) {
    for table in ["cuda", "xid"] {
        for &ago in hours {
            let found = names(&hour_folder(root, table, ago));
            assert!(
                found.len() == 2
                    && found[0].starts_with("_compaction-")
                    && found[0].ends_with(".json")
                    && found[1].starts_with("compact-")
                    && found[1].ends_with(".parquet"),
                "{table} {ago} h ago: {found:?}"
            );
        }
    }
}
