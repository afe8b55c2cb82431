//! The Iceberg tables `gpuship-lake compact` writes (`<lake>/iceberg/<kind>`), read by two
//! readers nobody here wrote: DuckDB's iceberg extension and pyiceberg (its `StaticTable` on
//! the metadata files, and its SQL catalog on SQLite after `register_table`). Each must see
//! exactly the rows of the compacted hours (counts and per-column sums), once, after a rerun,
//! after a later run adds hours (older snapshots still read as they were), and after the job
//! was SIGKILLed in the middle of a table's commit.

use std::path::Path;

use super::fixture::{compact, lake_sums, lake_sums_with, stderr, write_lake, SUMS};
use super::phases::paused_at;
use crate::support::lake::{duckdb_iceberg, python_script};

/// The checksums DuckDB's `iceberg_scan` computes over `table` (`<lake>/iceberg/<kind>`, read
/// through its `version-hint.text`, or a metadata file's path).
fn duckdb_table_sums(location: impl Fn(&str) -> String) -> Vec<Vec<i128>> {
    SUMS.iter()
        .map(|(table, columns)| {
            let sql = format!("SELECT {columns} FROM iceberg_scan('{}')", location(table));
            numbers(&duckdb_iceberg(&sql)[0])
        })
        .collect()
}

/// The same checksums over what pyiceberg reads: the table from its metadata files alone
/// (`StaticTable`), and its row count again through a SQL catalog on SQLite after registering
/// the table there (twice, dropping the entry between, as operations.md says to after each
/// run). DuckDB only adds up the Arrow table pyiceberg returned.
fn pyiceberg_sums(root: &Path) -> Vec<Vec<i128>> {
    let script = r#"
import json, os, sys, duckdb
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import StaticTable
root, tables = sys.argv[1], json.loads(sys.argv[2])
catalog = SqlCatalog("gpuship", uri="sqlite:///%s/catalog.db" % sys.argv[3],
                     warehouse="file://%s" % sys.argv[3])
catalog.create_namespace("gpuship")
out = []
for name, columns in tables:
    location = "%s/iceberg/%s" % (root, name)
    rows = StaticTable.from_metadata(location).scan().to_arrow()
    sums = [str(v) for v in duckdb.sql("SELECT %s FROM rows" % columns).fetchone()]
    hint = open(location + "/metadata/version-hint.text").read()
    newest = "%s/metadata/v%s.metadata.json" % (location, hint)
    catalog.register_table(("gpuship", name), newest)
    # As after each run (docs/operations.md): forget the entry, register the newest file again.
    catalog.drop_table(("gpuship", name))
    assert os.path.exists(newest), "drop_table deleted the metadata file"
    catalog.register_table(("gpuship", name), newest)
    registered = catalog.load_table(("gpuship", name)).scan().to_arrow().num_rows
    assert registered == rows.num_rows, (registered, rows.num_rows)
    out.append(sums)
print(json.dumps(out))
"#;
    let catalog = tempfile::tempdir().expect("catalog dir");
    let sums_json = serde_json::to_string(&SUMS).expect("json");
    let printed = python_script(
        script,
        &[
            &root.display().to_string(),
            &sums_json,
            &catalog.path().display().to_string(),
        ],
    );
    let rows: Vec<Vec<String>> = serde_json::from_str(&printed).expect("pyiceberg's JSON");
    rows.iter().map(|row| numbers(row)).collect()
}

fn numbers(row: &[String]) -> Vec<i128> {
    row.iter()
        .map(|v| v.parse().unwrap_or_else(|_| panic!("not a number: {v}")))
        .collect()
}

fn metadata(root: &Path, table: &str, version: u64) -> serde_json::Value {
    let path = root.join(format!("iceberg/{table}/metadata/v{version}.metadata.json"));
    let text = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_slice(&text).expect("metadata JSON")
}

fn hint(root: &Path, table: &str) -> String {
    std::fs::read_to_string(root.join(format!("iceberg/{table}/metadata/version-hint.text")))
        .expect("version hint")
}

#[test]
fn every_table_reads_back_exactly_through_duckdb_and_pyiceberg_and_keeps_its_snapshots() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    let data = root.display().to_string();
    write_lake(root, 3, &[5, 4, 3], 3, 40);
    let before = lake_sums(&data, &[]);

    let run = compact(&data, &["--retire-after", "0s"], &[]);
    assert!(run.status.success(), "{}", stderr(&run));
    let stdout = String::from_utf8_lossy(&run.stdout);
    // 3 closed hours of cuda and xid: one compacted file each.
    assert!(
        stdout.contains("iceberg: 6 files (1107 rows) added; 0 tables failed"),
        "{stdout}"
    );
    let by_hint = |table: &str| format!("{data}/iceberg/{table}");
    assert_eq!(duckdb_table_sums(by_hint), before, "DuckDB");
    assert_eq!(pyiceberg_sums(root), before, "pyiceberg");
    assert_eq!(
        lake_sums_with(&data, &[], &["--iceberg"]),
        before,
        "gpuship's readers from the tables"
    );

    for table in ["cuda", "xid"] {
        assert_eq!(hint(root, table), "1", "{table}");
        let meta = metadata(root, table, 1);
        assert_eq!(meta["format-version"], 2);
        assert_eq!(meta["current-schema-id"], 7, "gpuship's schema version");
        assert_eq!(
            meta["partition-specs"][0]["fields"][0]["transform"], "hour",
            "{table}"
        );
        let snapshot = &meta["snapshots"][0];
        assert_eq!(snapshot["summary"]["added-data-files"], "3", "{table}");
        assert_eq!(
            snapshot["summary"]["gpuship.markers"]
                .as_str()
                .expect("markers")
                .lines()
                .count(),
            3
        );
        assert!(meta["properties"]["schema.name-mapping.default"].is_string());
    }

    // Nothing new: no new snapshot.
    let again = compact(&data, &["--retire-after", "0s"], &[]);
    assert!(again.status.success(), "{}", stderr(&again));
    assert!(
        String::from_utf8_lossy(&again.stdout).contains("iceberg: 0 files (0 rows) added"),
        "{}",
        String::from_utf8_lossy(&again.stdout)
    );
    assert!(!root.join("iceberg/cuda/metadata/v2.metadata.json").exists());

    // A later hour: a second snapshot; the first still reads as it was (time travel).
    write_lake(root, 3, &[2], 3, 40);
    let grown = lake_sums(&data, &[]);
    let later = compact(&data, &["--retire-after", "0s"], &[]);
    assert!(later.status.success(), "{}", stderr(&later));
    assert_eq!(hint(root, "cuda"), "2");
    assert_eq!(duckdb_table_sums(by_hint), grown, "DuckDB, v2");
    assert_eq!(pyiceberg_sums(root), grown, "pyiceberg, v2");
    assert_eq!(
        lake_sums_with(&data, &[], &["--iceberg"]),
        grown,
        "gpuship, v2"
    );
    let at_v1 = |table: &str| format!("{data}/iceberg/{table}/metadata/v1.metadata.json");
    assert_eq!(
        duckdb_table_sums(at_v1),
        before,
        "DuckDB, the first snapshot"
    );
    let meta = metadata(root, "cuda", 2);
    assert_eq!(meta["snapshots"].as_array().expect("snapshots").len(), 2);
    assert_eq!(
        meta["snapshots"][1]["parent-snapshot-id"],
        meta["snapshots"][0]["snapshot-id"]
    );
    assert_eq!(meta["snapshots"][1]["summary"]["total-data-files"], "4");
    assert_eq!(meta["metadata-log"].as_array().expect("log").len(), 1);
}

/// Killed at `phase` of the first table's commit (`xid`'s: kinds go in declaration order),
/// the rerun commits each marker's files once.
fn killed_in_commit(phase: &str, versions_after_kill: &[&str]) {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    let data = root.display().to_string();
    write_lake(root, 3, &[4, 3], 3, 30);
    let before = lake_sums(&data, &[]);
    let mut child = paused_at(&data, phase, &[], &[]);
    child.kill().expect("SIGKILL");
    child.wait().expect("reaped");
    let mut found: Vec<String> = std::fs::read_dir(root.join("iceberg/xid/metadata"))
        .expect("metadata folder")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".json") || n.ends_with(".text"))
        .collect();
    found.sort();
    assert_eq!(found, versions_after_kill, "after the kill at {phase}");
    assert_eq!(
        lake_sums(&data, &[]),
        before,
        "folder readers after the kill"
    );

    let rerun = compact(&data, &[], &[]);
    assert!(rerun.status.success(), "{}", stderr(&rerun));
    let by_hint = |table: &str| format!("{data}/iceberg/{table}");
    assert_eq!(duckdb_table_sums(by_hint), before, "DuckDB after the rerun");
    assert_eq!(pyiceberg_sums(root), before, "pyiceberg after the rerun");
    let version = hint(root, "xid");
    assert_eq!(version, "1", "one commit");
    let meta = metadata(root, "xid", 1);
    let markers: usize = meta["snapshots"]
        .as_array()
        .expect("snapshots")
        .iter()
        .map(|s| {
            s["summary"]["gpuship.markers"]
                .as_str()
                .map_or(0, |m| m.lines().count())
        })
        .sum();
    assert_eq!(markers, 2, "each hour's marker added once: {meta}");
}

#[test]
fn killed_before_a_tables_metadata_file_the_rerun_commits_once() {
    // The manifest and manifest list are written, nothing names them.
    killed_in_commit("iceberg-written", &[]);
}

#[test]
fn killed_after_a_tables_metadata_file_the_rerun_finds_its_commit() {
    // The commit is there; the hint is not.
    killed_in_commit("iceberg-committed", &["v1.metadata.json"]);
}

/// A table appended to by four runs with `--merge-manifests-at 2 --keep-snapshots 2`: the
/// third and fourth runs merge the previous manifests into one; the fourth keeps snapshots 3
/// and 4 and the metadata files v2 to v4, and deletes v1 and what only snapshots 1 and 2 read.
/// DuckDB and pyiceberg read the table exactly, snapshot 3 still reads as it was, and a rerun
/// adds nothing (the first runs' markers, no longer named by a snapshot, are found from the
/// table's files).
#[test]
fn merged_manifests_and_expired_snapshots_read_back_exactly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    let data = root.display().to_string();
    let merge_at = [
        "--retire-after",
        "0s",
        "--merge-manifests-at",
        "2",
        "--keep-snapshots",
        "2",
    ];
    let mut sums_after = Vec::new();
    for ago in [6, 5, 4, 3] {
        write_lake(root, 2, &[ago], 2, 30);
        let run = compact(&data, &merge_at, &[]);
        assert!(run.status.success(), "{}", stderr(&run));
        sums_after.push(lake_sums(&data, &[]));
    }
    for table in ["cuda", "xid"] {
        let meta = metadata(root, table, 4);
        let snapshots = meta["snapshots"].as_array().expect("snapshots");
        assert_eq!(snapshots.len(), 2, "{table}");
        let summary = |i: usize, key: &str| snapshots[i]["summary"][key].as_str().map(String::from);
        for i in 0..2 {
            assert_eq!(
                summary(i, "manifests-created").as_deref(),
                Some("2"),
                "{table}"
            );
            assert_eq!(
                summary(i, "manifests-replaced").as_deref(),
                Some("2"),
                "{table}"
            );
        }
        assert_eq!(meta["metadata-log"].as_array().expect("log").len(), 2);
        assert_eq!(hint(root, table), "4");
        let folder = root.join(format!("iceberg/{table}/metadata"));
        assert!(!folder.join("v1.metadata.json").exists(), "{table}");
        assert!(folder.join("v2.metadata.json").exists(), "{table}");
        let avro = std::fs::read_dir(&folder)
            .expect("metadata folder")
            .filter(|e| {
                let name = e.as_ref().expect("entry").file_name();
                name.to_string_lossy().ends_with(".avro")
            })
            .count();
        assert_eq!(
            avro, 6,
            "{table}: two lists, each with a merged and a new manifest"
        );
    }
    let by_hint = |table: &str| format!("{data}/iceberg/{table}");
    assert_eq!(duckdb_table_sums(by_hint), sums_after[3], "DuckDB");
    assert_eq!(pyiceberg_sums(root), sums_after[3], "pyiceberg");
    assert_eq!(
        lake_sums_with(&data, &[], &["--iceberg"]),
        sums_after[3],
        "gpuship"
    );
    let at_v3 = |table: &str| format!("{data}/iceberg/{table}/metadata/v3.metadata.json");
    assert_eq!(
        duckdb_table_sums(at_v3),
        sums_after[2],
        "DuckDB, the kept snapshot before the last"
    );
    let again = compact(&data, &merge_at, &[]);
    assert!(again.status.success(), "{}", stderr(&again));
    assert!(
        String::from_utf8_lossy(&again.stdout).contains("iceberg: 0 files (0 rows) added"),
        "{}",
        String::from_utf8_lossy(&again.stdout)
    );
}
