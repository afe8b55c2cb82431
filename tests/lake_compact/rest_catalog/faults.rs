//! The REST catalog when it misbehaves: down, answering 409, oversized, garbled or climbing
//! answers, an entry of another table, and settings refused before any work.

use super::*;

#[test]
fn a_catalog_down_or_contended_falls_behind_and_catches_up_with_nothing_twice() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    let data = root.display().to_string();
    let catalog = IcebergRestCatalog::start();
    write_lake(root, 2, &[6, 5], 2, 20);
    let first = lake_sums(&data, &[]);

    // Down for the whole run: the tables commit to their files, the entries stay behind and
    // the run says so with exit status 1.
    catalog.fault("down", 1_000);
    let (ok, stdout, err) = run(&data, &catalog, &[]);
    assert!(
        !ok,
        "a run whose catalog was down succeeded:\n{stdout}\n{err}"
    );
    assert!(
        catalog_line(&stdout).ends_with("0 in step; 2 behind"),
        "{stdout}"
    );
    for table in ["cuda", "xid"] {
        assert!(
            err.contains(&format!(
                "gpuship.{table} in the REST catalog {} is behind v1 (the next run brings it up \
                 to date)",
                catalog.uri()
            )),
            "{err}"
        );
    }
    assert!(err.contains("503"), "{err}");
    assert_eq!(lake_sums_with(&data, &[], &["--iceberg"]), first);
    catalog.fault("down", 0);

    // Up again, with more hours and two commits answered 409 as a concurrent writer's would:
    // registered from the newest files (v2), each entry then in step at the next run.
    write_lake(root, 2, &[4], 2, 20);
    let second = lake_sums(&data, &[]);
    let (ok, stdout, err) = run(&data, &catalog, &[]);
    assert!(ok, "{stdout}\n{err}");
    assert!(
        catalog_line(&stdout).contains(": 2 tables registered"),
        "{stdout}"
    );
    assert_eq!(rest_sums(&catalog).0, second);

    write_lake(root, 2, &[3], 2, 20);
    let third = lake_sums(&data, &[]);
    catalog.fault("fail-commits", 2);
    let (ok, stdout, err) = run(&data, &catalog, &[]);
    assert!(ok, "{stdout}\n{err}");
    assert!(
        catalog_line(&stdout).contains("0 tables registered, 2 brought up to date"),
        "{stdout}"
    );
    assert_eq!(
        err.matches("the REST catalog did not take the table's state; trying again")
            .count(),
        2,
        "two 409s, each tried again:\n{err}"
    );
    let (sums, snapshots) = rest_sums(&catalog);
    assert_eq!(sums, third, "every row once");
    for (table, held) in ["cuda", "xid"].iter().zip(&snapshots) {
        assert_eq!(held, &lake_snapshots(root, table), "{table}");
        assert_eq!(held.0.len(), 3, "{table}: no snapshot twice");
    }
}

#[test]
fn an_entry_of_another_table_is_refused_and_left_as_it_was() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    let data = root.display().to_string();
    let catalog = IcebergRestCatalog::start();
    write_lake(root, 1, &[5], 1, 10);
    // Someone else's `other.cuda`, made through pyiceberg's SQL catalog on the same database.
    let script = r#"
import sys
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.schema import Schema
from pyiceberg.types import NestedField, StringType
c = SqlCatalog("gpuship", uri="sqlite:///" + sys.argv[1], warehouse="file://" + sys.argv[2])
c.create_namespace("other")
t = c.create_table(("other", "cuda"), Schema(NestedField(1, "note", StringType())))
print(t.metadata.table_uuid, t.metadata_location)
"#;
    let made = python_script(
        script,
        &[
            &catalog.database().display().to_string(),
            &dir.path().join("other").display().to_string(),
        ],
    );
    let made = made.trim();
    let (uuid, location) = made.split_once(' ').expect("uuid and location");

    let (ok, stdout, err) = run(&data, &catalog, &["--catalog-namespace", "other"]);
    assert!(!ok, "{stdout}\n{err}");
    assert!(
        err.contains(&format!(
            "the catalog's entry is another table (uuid \"{uuid}\""
        )),
        "{err}"
    );
    assert!(catalog_line(&stdout).ends_with("1 behind"), "{stdout}");
    // The entry still points where it did; the lake's xid table was registered beside it.
    let check = format!(
        "from pyiceberg.catalog.rest import RestCatalog\n\
         c = RestCatalog('x', uri='{}')\n\
         print(c.load_table(('other', 'cuda')).metadata_location)\n\
         print(c.load_table(('other', 'xid')).scan().to_arrow().num_rows)",
        catalog.uri()
    );
    let read = python_script(&check, &[]);
    assert_eq!(read, format!("{location}\n1\n"));
}

#[test]
fn an_oversized_garbled_or_climbing_answer_fails_that_table_with_a_clear_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    let data = root.display().to_string();
    write_lake(root, 1, &[5], 1, 10);
    for (fault, says) in [
        ("huge", "an answer of more than 67108864 bytes"),
        ("garbled", "the answer is not JSON"),
        (
            "prefix",
            "the catalog's route prefix \"../elsewhere\" climbs out of /v1/",
        ),
    ] {
        let catalog = IcebergRestCatalog::start();
        catalog.fault(fault, 1);
        let (ok, stdout, err) = run(&data, &catalog, &[]);
        assert!(!ok, "{fault}: {stdout}\n{err}");
        assert!(err.contains(says), "{fault}: {err}");
        assert!(
            !err.contains('\u{1b}'),
            "{fault}: an escape reached the terminal: {err}"
        );
        // The other table was registered; the next run registers the first.
        assert!(
            catalog_line(&stdout)
                .ends_with("1 tables registered, 0 brought up to date, 0 in step; 1 behind"),
            "{stdout}"
        );
        let (ok, stdout, err) = run(&data, &catalog, &[]);
        assert!(ok, "{fault}: {stdout}\n{err}");
        assert_eq!(rest_sums(&catalog).0, lake_sums(&data, &[]), "{fault}");
    }
}

#[test]
fn a_bad_catalog_setting_is_refused_before_any_work() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().display().to_string();
    for (args, says) in [
        (
            vec!["--catalog-uri", "http://u:p@127.0.0.1:1"],
            "without a query, fragment or credentials",
        ),
        (
            vec!["--catalog-uri", "127.0.0.1:1"],
            "must start with http://",
        ),
        (
            vec![
                "--catalog-uri",
                "http://127.0.0.1:1",
                "--catalog-namespace",
                "a..b",
            ],
            "each dot-separated level",
        ),
        (
            vec!["--catalog-uri", "http://127.0.0.1:1", "--no-iceberg"],
            "--no-iceberg writes no tables",
        ),
    ] {
        let output = compact(&data, &args, &[]);
        assert_eq!(
            output.status.code(),
            Some(1),
            "{args:?}: {}",
            stderr(&output)
        );
        assert!(
            stderr(&output).contains(says),
            "{args:?}: {}",
            stderr(&output)
        );
        assert!(!stderr(&output).contains("u:p@"), "{}", stderr(&output));
    }
}
