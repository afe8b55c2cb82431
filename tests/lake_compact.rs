//! `gpuship-lake compact` over lakes written with the Parquet sink's own writer (the agents'
//! names, encodings and metadata): every row kept exactly once (counts and per-column sums,
//! through gpuship's readers and through DuckDB), closed hours rewritten into one sorted file
//! each, open hours, other files and the accounting documents untouched, readers exact while a
//! run is under way. The kill-at-every-phase tests are in `lake_compact/phases.rs`, the S3 one
//! in `lake_compact/s3.rs`, the Iceberg tables' in `lake_compact/iceberg.rs`, a REST catalog kept
//! in step with them in `lake_compact/rest_catalog.rs`, the hourly roll-up of `cuda_stats` in
//! `lake_compact/rollup.rs`.

mod fixture;
mod iceberg;
mod phases;
mod rest_catalog;
mod rollup;
mod s3;

use std::path::Path;
use std::process::Command;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;

use crate::support::lake::duckdb;
use fixture::{
    assert_compacted, compact, duckdb_sums, hour_folder, lake_binary, lake_sums, names, stderr,
    write_lake,
};

/// A row's `host` and `time_ns`.
type HostTime = (String, i64);

/// (host, time_ns) of every row of the Parquet file at `path`, in file order, and each row
/// group's (min, max) host from its statistics.
fn rows_in_order(path: &Path) -> (Vec<HostTime>, Vec<(String, String)>) {
    let file = std::fs::File::open(path).expect("compacted file");
    let builder = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
        .expect("a Parquet file");
    let groups = builder
        .metadata()
        .row_groups()
        .iter()
        .map(|g| {
            let host = g
                .columns()
                .iter()
                .find(|c| c.column_path().string() == "host");
            let stats = host.and_then(|c| c.statistics()).expect("host statistics");
            let text =
                |b: Option<&[u8]>| String::from_utf8_lossy(b.unwrap_or_default()).into_owned();
            (text(stats.min_bytes_opt()), text(stats.max_bytes_opt()))
        })
        .collect();
    let mut rows = Vec::new();
    for batch in builder.build().expect("reader") {
        let batch = batch.expect("batch");
        let host = batch.column_by_name("host").expect("host");
        let host = arrow_array::cast::as_string_array(host);
        let time = batch
            .column_by_name("time_ns")
            .expect("time_ns")
            .as_primitive::<Int64Type>();
        for i in 0..batch.num_rows() {
            rows.push((host.value(i).to_string(), time.value(i)));
        }
    }
    (rows, groups)
}

#[test]
fn closed_hours_become_one_sorted_file_each_and_every_row_stays_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    let closed = [5, 4, 3];
    // Hour 0 is the current one: open.
    write_lake(root, 4, &[5, 4, 3, 0], 3, 40);
    std::fs::create_dir_all(root.join("_accounting")).unwrap();
    std::fs::write(
        root.join("_accounting/accounting-node.json"),
        b"{\"accounting\":{}}",
    )
    .unwrap();
    let open_before = names(&hour_folder(root, "cuda", 0));
    assert_eq!(open_before.len(), 12, "4 hosts x 3 files: {open_before:?}");
    let data = root.display().to_string();
    let run_duckdb = |sql: &str| duckdb(sql);
    let before = lake_sums(&data, &[]);
    assert_eq!(
        before,
        duckdb_sums(&data, run_duckdb),
        "the readers agree before"
    );
    assert_eq!(before[0][0], 4 * 4 * 3 * 40, "cuda rows");
    assert_eq!(before[0][0], before[0][1], "each time once");

    let dry = compact(&data, &["--dry-run"], &[]);
    assert!(dry.status.success(), "{}", stderr(&dry));
    let printed = String::from_utf8_lossy(&dry.stdout);
    assert_eq!(
        printed.matches("would compact 12 files").count(),
        6,
        "{printed}"
    );
    assert_eq!(
        names(&hour_folder(root, "cuda", 5)).len(),
        12,
        "a dry run changes nothing"
    );

    let run = compact(&data, &["--retire-after", "0s"], &[]);
    assert!(run.status.success(), "{}", stderr(&run));
    assert_eq!(
        String::from_utf8_lossy(&run.stdout).trim(),
        "compacted 6 hours: 72 files into 6 (1476 rows); deleted 72 replaced files and 0 \
         leftovers; 2 hours still open; 0 failed\niceberg: 6 files (1476 rows) added; 0 tables \
         failed"
    );
    assert_compacted(root, &closed);
    assert_eq!(
        names(&hour_folder(root, "cuda", 0)),
        open_before,
        "the open hour is untouched"
    );
    assert_eq!(
        std::fs::read(root.join("_accounting/accounting-node.json")).unwrap(),
        b"{\"accounting\":{}}"
    );
    assert_eq!(lake_sums(&data, &[]), before, "gpuship's readers after");
    assert_eq!(
        duckdb_sums(&data, run_duckdb),
        before,
        "DuckDB over the compacted folders"
    );

    // Sorted by host, then time; each row group's host range from its statistics.
    let folder = hour_folder(root, "cuda", 4);
    let file = names(&folder).pop().expect("compacted file");
    let (rows, groups) = rows_in_order(&folder.join(&file));
    assert_eq!(rows.len(), 4 * 3 * 40);
    let mut sorted = rows.clone();
    sorted.sort();
    assert_eq!(rows, sorted, "rows sorted by host and time");
    assert_eq!(
        groups,
        [("gpu-node-000".to_string(), "gpu-node-003".to_string())]
    );
    let count = duckdb(&format!(
        "SELECT count(*), min(host), max(host) FROM read_parquet('{}')",
        folder.join(&file).display()
    ));
    assert_eq!(count, [["480", "gpu-node-000", "gpu-node-003"]]);

    let again = compact(&data, &["--retire-after", "0s"], &[]);
    assert!(again.status.success(), "{}", stderr(&again));
    assert!(
        String::from_utf8_lossy(&again.stdout).starts_with("compacted 0 hours: 0 files"),
        "a second run has nothing to do: {}",
        String::from_utf8_lossy(&again.stdout)
    );
}

#[test]
fn files_that_arrive_after_a_compaction_are_read_and_compacted_next_time() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    let data = root.display().to_string();
    write_lake(root, 2, &[3], 2, 10);
    // Replaced files stay (retire-after 1h): readers still see each row once.
    let first = compact(&data, &[], &[]);
    assert!(first.status.success(), "{}", stderr(&first));
    assert_eq!(names(&hour_folder(root, "cuda", 3)).len(), 2 + 4);
    // A late agent (another host) writes into the compacted hour.
    let late = tempfile::tempdir().expect("tempdir");
    write_lake(late.path(), 3, &[3], 1, 10);
    for table in ["cuda", "xid"] {
        let from = hour_folder(late.path(), table, 3);
        for name in names(&from)
            .into_iter()
            .filter(|n| n.contains("gpu-node-002"))
        {
            std::fs::copy(from.join(&name), hour_folder(root, table, 3).join(&name)).unwrap();
        }
    }
    let sums = lake_sums(&data, &[]);
    assert_eq!(
        sums[0][0],
        2 * 2 * 10 + 10,
        "compacted rows + the late file's"
    );
    assert_eq!(sums[0][0], sums[0][1]);
    let second = compact(&data, &["--retire-after", "0s"], &[]);
    assert!(second.status.success(), "{}", stderr(&second));
    let found = names(&hour_folder(root, "cuda", 3));
    assert_eq!(
        found
            .iter()
            .filter(|n| n.starts_with("_compaction-"))
            .count(),
        2,
        "{found:?}"
    );
    assert_eq!(
        found.iter().filter(|n| n.starts_with("compact-")).count(),
        2,
        "{found:?}"
    );
    assert!(!found.iter().any(|n| n.starts_with("part-")), "{found:?}");
    assert_eq!(lake_sums(&data, &[]), sums);
    assert_eq!(duckdb_sums(&data, |sql: &str| duckdb(sql)), sums);
}

#[test]
fn a_damaged_marker_stops_the_job_in_its_hour_only_and_readers_say_so() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    let data = root.display().to_string();
    write_lake(root, 2, &[4, 3], 2, 10);
    let before = lake_sums(&data, &[]);
    let damaged = hour_folder(root, "cuda", 4).join("_compaction-broken.json");
    std::fs::write(&damaged, b"{\"format\": 1, \"run\": \"trunc").unwrap();
    let run = compact(&data, &["--retire-after", "0s"], &[]);
    assert_eq!(run.status.code(), Some(1), "{}", stderr(&run));
    let message = stderr(&run);
    assert!(
        message.contains("compaction marker cuda/dt=")
            && message.contains("/_compaction-broken.json is damaged: EOF while parsing")
            && message.contains("the hour is left alone"),
        "{message}"
    );
    assert_eq!(
        names(&hour_folder(root, "cuda", 4)).len(),
        4 + 1,
        "left alone"
    );
    assert_eq!(
        names(&hour_folder(root, "cuda", 3)).len(),
        2,
        "the next hour is done"
    );
    let output = Command::new(lake_binary())
        .args([
            "query",
            "SELECT count(*) FROM cuda",
            "--since",
            "30h",
            "--data",
            &data,
        ])
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("_compaction-broken.json"),
        "{}",
        stderr(&output)
    );
    assert_eq!(lake_sums(&data, &[]), before);
}

#[test]
fn a_second_run_on_a_local_lake_is_refused_while_one_runs() {
    use std::os::fd::AsRawFd;
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    write_lake(root, 1, &[3], 1, 5);
    let lock = std::fs::File::create(root.join(".gpuship-compact.lock")).unwrap();
    // SAFETY: flock(2) on a descriptor `lock` owns for the duration of the call.
    assert_eq!(unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) }, 0);
    let data = root.display().to_string();
    let refused = compact(&data, &[], &[]);
    assert_eq!(refused.status.code(), Some(1), "{}", stderr(&refused));
    assert!(
        stderr(&refused).contains("another gpuship-lake compact runs on this lake"),
        "{}",
        stderr(&refused)
    );
    assert_eq!(names(&hour_folder(root, "cuda", 3)).len(), 1, "untouched");
    drop(lock);
    let run = compact(&data, &[], &[]);
    assert!(run.status.success(), "{}", stderr(&run));
}

#[test]
fn readers_running_while_a_compaction_runs_see_each_row_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    let data = root.display().to_string();
    write_lake(root, 6, &[6, 5, 4, 3], 4, 200);
    let before = lake_sums(&data, &[]);
    // Replaced files stay for --retire-after (1 h): a reader that listed an hour before its
    // commit still finds them.
    let mut job = Command::new(lake_binary())
        .args(["compact", "--data", &data])
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("gpuship-lake compact");
    let mut reads = 0;
    while job.try_wait().expect("wait").is_none() {
        assert_eq!(lake_sums(&data, &[]), before, "read {reads} during the run");
        reads += 1;
    }
    assert!(job.wait().unwrap().success());
    assert!(reads >= 1, "no read overlapped the run");
    assert_eq!(lake_sums(&data, &[]), before);
    let retire = compact(&data, &["--retire-after", "0s"], &[]);
    assert!(retire.status.success(), "{}", stderr(&retire));
    assert_compacted(root, &[6, 5, 4, 3]);
    assert_eq!(lake_sums(&data, &[]), before);
}
