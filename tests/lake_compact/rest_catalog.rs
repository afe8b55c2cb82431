//! `gpuship-lake compact --catalog-uri`: an Apache Iceberg REST catalog kept in step with the
//! tables (`tests/fixtures/rest_catalog.py`, the REST API over pyiceberg's SQL catalog, which
//! decides every commit). The first run registers each table, later runs commit what the
//! entry lacks; pyiceberg's REST client and DuckDB's iceberg extension, attached to the
//! catalog, read exactly the lake's rows. A catalog that is down, or that answers 409 as a
//! concurrent writer would, leaves its entries behind for the next run, which brings them up
//! to date with nothing committed twice; an entry of another table is refused, never
//! overwritten; the token is never printed.

use super::fixture::{compact, lake_sums, lake_sums_with, stderr, write_lake, SUMS};
use super::phases::paused_at;
use crate::support::lake::{duckdb_iceberg_after, python_script};
use crate::support::rest_catalog::IcebergRestCatalog;

/// A table's snapshot ids and the current one.
type Snapshots = (Vec<i64>, i64);

const TOKEN: &str = "catalog-token-7f3a9c-never-printed";

/// Per-column sums of each table as pyiceberg's REST client reads it from the catalog, with
/// the snapshot ids the catalog's entry holds and the one `main` names.
fn rest_sums(catalog: &IcebergRestCatalog) -> (Vec<Vec<i128>>, Vec<Snapshots>) {
    let script = r#"
import json, sys, duckdb
from pyiceberg.catalog.rest import RestCatalog
catalog = RestCatalog("lake", uri=sys.argv[1])
sums, snapshots = [], []
for name, columns in json.loads(sys.argv[2]):
    table = catalog.load_table(("gpuship", name))
    rows = table.scan().to_arrow()
    sums.append([str(v) for v in duckdb.sql("SELECT %s FROM rows" % columns).fetchone()])
    snapshots.append([[s.snapshot_id for s in table.metadata.snapshots],
                      table.metadata.current_snapshot_id])
print(json.dumps([sums, snapshots]))
"#;
    let sums_json = serde_json::to_string(&SUMS).expect("json");
    let printed = python_script(script, &[&catalog.uri(), &sums_json]);
    let (sums, snapshots): (Vec<Vec<String>>, Vec<Snapshots>) =
        serde_json::from_str(&printed).expect("pyiceberg's JSON");
    let sums = sums
        .iter()
        .map(|row| row.iter().map(|v| v.parse().expect("a number")).collect())
        .collect();
    (sums, snapshots)
}

/// The snapshot ids of the lake's newest metadata file of `table`, and the current one.
fn lake_snapshots(root: &std::path::Path, table: &str) -> Snapshots {
    let folder = root.join(format!("iceberg/{table}/metadata"));
    let hint = std::fs::read_to_string(folder.join("version-hint.text")).expect("hint");
    let text = std::fs::read(folder.join(format!("v{hint}.metadata.json"))).expect("metadata");
    let metadata: serde_json::Value = serde_json::from_slice(&text).expect("JSON");
    let ids = metadata["snapshots"]
        .as_array()
        .expect("snapshots")
        .iter()
        .map(|s| s["snapshot-id"].as_i64().expect("id"))
        .collect();
    (
        ids,
        metadata["current-snapshot-id"].as_i64().expect("current"),
    )
}

/// The checksums DuckDB computes with the REST catalog attached.
fn duckdb_rest_sums(catalog: &IcebergRestCatalog) -> Vec<Vec<i128>> {
    SUMS.iter()
        .map(|(table, columns)| {
            let attach = format!(
                "ATTACH 'lake' AS lake (TYPE iceberg, ENDPOINT '{}', AUTHORIZATION_TYPE 'none')",
                catalog.uri()
            );
            let sql = format!("SELECT {columns} FROM lake.gpuship.{table}");
            duckdb_iceberg_after(&attach, &sql)[0]
                .iter()
                .map(|v| v.parse().expect("a number"))
                .collect()
        })
        .collect()
}

fn run(data: &str, catalog: &IcebergRestCatalog, extra: &[&str]) -> (bool, String, String) {
    let uri = catalog.uri();
    let mut args = vec!["--retire-after", "0s", "--catalog-uri", &uri];
    args.extend_from_slice(extra);
    let output = compact(data, &args, &[("GPUSHIP_CATALOG_TOKEN", TOKEN.to_string())]);
    let (stdout, err) = (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr(&output),
    );
    assert!(
        !stdout.contains(TOKEN) && !err.contains(TOKEN),
        "the token was printed:\n{stdout}\n{err}"
    );
    (output.status.success(), stdout, err)
}

fn catalog_line(stdout: &str) -> &str {
    stdout
        .lines()
        .find(|l| l.contains("catalog http://"))
        .unwrap_or_else(|| panic!("no catalog line:\n{stdout}"))
}

#[test]
fn tables_are_registered_then_kept_in_step_and_read_exactly_through_the_catalog() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    let data = root.display().to_string();
    let catalog = IcebergRestCatalog::start();
    write_lake(root, 3, &[6, 5], 2, 30);
    let before = lake_sums(&data, &[]);

    let (ok, stdout, err) = run(&data, &catalog, &[]);
    assert!(ok, "{stdout}\n{err}");
    let expect = |registered, committed, in_step| {
        format!(
            "catalog {} (gpuship): {registered} tables registered, {committed} brought up to \
             date, {in_step} in step; 0 behind",
            catalog.uri()
        )
    };
    assert!(
        catalog_line(&stdout).ends_with(&expect(2, 0, 0)),
        "{stdout}"
    );
    let (sums, snapshots) = rest_sums(&catalog);
    assert_eq!(sums, before, "pyiceberg through the catalog");
    assert_eq!(snapshots[0], lake_snapshots(root, "cuda"));
    assert_eq!(snapshots[1], lake_snapshots(root, "xid"));
    assert_eq!(
        duckdb_rest_sums(&catalog),
        before,
        "DuckDB attached to the catalog"
    );

    // Two more hours: the entries are behind by one snapshot each, and get it in one commit.
    write_lake(root, 3, &[4, 3], 2, 30);
    let after = lake_sums(&data, &[]);
    assert_ne!(after, before);
    let (ok, stdout, err) = run(&data, &catalog, &[]);
    assert!(ok, "{stdout}\n{err}");
    assert!(
        catalog_line(&stdout).ends_with(&expect(0, 2, 0)),
        "{stdout}"
    );
    let (sums, snapshots) = rest_sums(&catalog);
    assert_eq!(sums, after, "pyiceberg through the catalog");
    for (table, held) in ["cuda", "xid"].iter().zip(&snapshots) {
        assert_eq!(held, &lake_snapshots(root, table), "{table}");
        assert_eq!(held.0.len(), 2, "{table}: both snapshots");
    }
    assert_eq!(
        duckdb_rest_sums(&catalog),
        after,
        "DuckDB attached to the catalog"
    );
    assert_eq!(
        lake_sums_with(&data, &[], &["--iceberg"]),
        after,
        "gpuship's readers"
    );

    // Nothing new: the entries are in step, nothing is committed.
    let (ok, stdout, err) = run(&data, &catalog, &[]);
    assert!(ok, "{stdout}\n{err}");
    assert!(
        catalog_line(&stdout).ends_with(&expect(0, 0, 2)),
        "{stdout}"
    );
    assert_eq!(rest_sums(&catalog).1, snapshots);

    // Expiry keeping 2 of 3 snapshots: the catalog's entry drops the oldest too.
    write_lake(root, 3, &[2], 2, 30);
    let last = lake_sums(&data, &[]);
    let (ok, stdout, err) = run(&data, &catalog, &["--keep-snapshots", "2"]);
    assert!(ok, "{stdout}\n{err}");
    assert!(
        catalog_line(&stdout).ends_with(&expect(0, 2, 0)),
        "{stdout}"
    );
    let (sums, held) = rest_sums(&catalog);
    assert_eq!(sums, last);
    for (table, (held, before)) in ["cuda", "xid"].iter().zip(held.iter().zip(&snapshots)) {
        assert_eq!(held, &lake_snapshots(root, table), "{table}");
        assert_eq!(
            held.0[..],
            [before.0[1], held.1],
            "{table}: the oldest removed"
        );
    }
    assert_eq!(
        duckdb_rest_sums(&catalog),
        last,
        "DuckDB attached to the catalog"
    );
}

#[test]
fn a_run_killed_between_a_tables_commit_and_the_catalogs_is_caught_up_by_the_next() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    let data = root.display().to_string();
    let catalog = IcebergRestCatalog::start();
    write_lake(root, 2, &[6], 2, 20);
    let (ok, stdout, err) = run(&data, &catalog, &[]);
    assert!(ok, "{stdout}\n{err}");

    // The first table's v2 is committed; SIGKILL before its catalog entry hears of it.
    write_lake(root, 2, &[5], 2, 20);
    let uri = catalog.uri();
    let mut child = paused_at(&data, "iceberg-committed", &["--catalog-uri", &uri], &[]);
    child.kill().expect("SIGKILL");
    child.wait().expect("wait");
    // One table's v2 is there (the hint, written after the commit, still names v1) and its
    // entry lists one snapshot; the other table was not reached.
    let (_, entries) = rest_sums(&catalog);
    let committed: Vec<bool> = ["cuda", "xid"]
        .iter()
        .map(|t| {
            root.join(format!("iceberg/{t}/metadata/v2.metadata.json"))
                .exists()
        })
        .collect();
    assert_eq!(committed.iter().filter(|c| **c).count(), 1, "{committed:?}");
    assert!(entries.iter().all(|e| e.0.len() == 1), "{entries:?}");

    let (ok, stdout, err) = run(&data, &catalog, &[]);
    assert!(ok, "{stdout}\n{err}");
    assert!(
        catalog_line(&stdout).contains("0 tables registered, 2 brought up to date, 0 in step"),
        "{stdout}"
    );
    let (sums, snapshots) = rest_sums(&catalog);
    assert_eq!(sums, lake_sums(&data, &[]), "every row once");
    for (table, held) in ["cuda", "xid"].iter().zip(&snapshots) {
        assert_eq!(held, &lake_snapshots(root, table), "{table}");
        assert_eq!(held.0.len(), 2, "{table}");
    }
}

mod faults;
