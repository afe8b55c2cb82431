use std::collections::BTreeMap;

use arrow_schema::{DataType, Field, Schema, TimeUnit};
use serde_json::{json, Value};

use super::*;
use crate::iceberg::metadata::Snapshot;
use crate::iceberg::schema::IcebergSchema;

fn schema(
    id: i32,
    columns: &[&str],
    last: &mut i32,
    base: Option<&IcebergSchema>,
) -> IcebergSchema {
    let mut fields = vec![Field::new(
        "time",
        DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
        false,
    )];
    fields.extend(columns.iter().map(|c| Field::new(*c, DataType::Utf8, true)));
    IcebergSchema::evolve(base, &Schema::new(fields), id, last).unwrap()
}

fn snapshot(id: i64, markers: bool) -> Snapshot {
    let mut summary = BTreeMap::from([("operation".to_string(), "append".to_string())]);
    if markers {
        summary.insert(
            MARKERS_KEY.into(),
            format!("cuda/dt=2026-11-28/hour=0{id}/_compaction-r{id}.json"),
        );
    }
    Snapshot {
        snapshot_id: id,
        parent_snapshot_id: (id > 1).then_some(id - 1),
        sequence_number: id,
        timestamp_ms: id * 1_000,
        manifest_list: format!("file:///t/metadata/snap-{id}.avro"),
        summary,
        schema_id: Some(7),
    }
}

/// The lake's table with snapshots `ids`, `main` at the last.
fn ours(ids: impl IntoIterator<Item = i64>) -> TableMetadata {
    let mut last = 0;
    let first = schema(7, &["host"], &mut last, None);
    let mut metadata = TableMetadata::new(
        "6c1f0bd2-0000-4000-8000-000000000001".into(),
        "file:///t".into(),
        &first,
        0,
    );
    for id in ids {
        metadata.add_snapshot(snapshot(id, true), None);
    }
    metadata
}

fn as_catalog(metadata: &TableMetadata) -> Value {
    serde_json::to_value(metadata).unwrap()
}

fn actions(commit: &CatalogCommit) -> Vec<String> {
    commit
        .updates
        .iter()
        .map(|u| u["action"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn an_entry_holding_what_the_files_hold_needs_no_commit() {
    let table = ours(1..=3);
    assert_eq!(commit_for(&table, &as_catalog(&table)).unwrap(), None);
    // Key order, defaults the catalog adds and a differently cased uuid change nothing.
    let mut theirs = as_catalog(&table);
    theirs["table-uuid"] = json!("6C1F0BD2-0000-4000-8000-000000000001");
    theirs["statistics"] = json!([]);
    assert_eq!(commit_for(&table, &theirs).unwrap(), None);
}

#[test]
fn an_entry_behind_gets_the_snapshots_it_lacks_in_order_then_main() {
    let behind = as_catalog(&ours(1..=2));
    let table = ours(1..=4);
    let commit = commit_for(&table, &behind).unwrap().expect("a commit");
    assert_eq!(
        actions(&commit),
        ["add-snapshot", "add-snapshot", "set-snapshot-ref"]
    );
    assert_eq!(commit.updates[0]["snapshot"]["snapshot-id"], 3);
    assert_eq!(commit.updates[0]["snapshot"]["parent-snapshot-id"], 2);
    assert_eq!(commit.updates[0]["snapshot"]["sequence-number"], 3);
    assert_eq!(
        commit.updates[0]["snapshot"]["manifest-list"],
        "file:///t/metadata/snap-3.avro"
    );
    assert_eq!(commit.updates[1]["snapshot"]["snapshot-id"], 4);
    assert_eq!(
        commit.updates[2],
        json!({"action": "set-snapshot-ref", "ref-name": "main", "type": "branch", "snapshot-id": 4})
    );
    assert_eq!(
        commit.requirements,
        [
            json!({"type": "assert-table-uuid", "uuid": "6c1f0bd2-0000-4000-8000-000000000001"}),
            json!({"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": 2}),
        ]
    );
}

#[test]
fn an_entry_without_snapshots_requires_main_to_be_absent() {
    let table = ours(1..=1);
    let empty = as_catalog(&ours([]));
    let commit = commit_for(&table, &empty).unwrap().expect("a commit");
    assert_eq!(actions(&commit), ["add-snapshot", "set-snapshot-ref"]);
    assert_eq!(commit.requirements[1]["snapshot-id"], Value::Null);
}

#[test]
fn a_new_schema_comes_before_the_snapshots_that_use_it() {
    let theirs = as_catalog(&ours(1..=1));
    let mut table = ours(1..=1);
    let mut last = table.last_column_id;
    let current = table.current_schema().unwrap();
    let next = schema(8, &["host", "kernel"], &mut last, Some(&current));
    table.set_schema(&next);
    table.add_snapshot(snapshot(2, true), None);
    let commit = commit_for(&table, &theirs).unwrap().expect("a commit");
    assert_eq!(
        actions(&commit),
        [
            "add-schema",
            "set-current-schema",
            "set-properties",
            "add-snapshot",
            "set-snapshot-ref"
        ]
    );
    assert_eq!(commit.updates[0]["schema"]["schema-id"], 8);
    assert_eq!(commit.updates[1]["schema-id"], 8);
    // The name mapping follows the schema.
    let mapping = commit.updates[2]["updates"]["schema.name-mapping.default"]
        .as_str()
        .unwrap();
    assert!(mapping.contains("kernel"), "{mapping}");
}

#[test]
fn snapshots_expiry_dropped_are_removed_after_main_moved() {
    let theirs = as_catalog(&ours(1..=3));
    let mut table = ours(1..=4);
    table.snapshots.retain(|s| s.snapshot_id >= 3);
    let commit = commit_for(&table, &theirs).unwrap().expect("a commit");
    assert_eq!(
        actions(&commit),
        ["add-snapshot", "set-snapshot-ref", "remove-snapshots"]
    );
    assert_eq!(commit.updates[2]["snapshot-ids"], json!([1, 2]));
}

#[test]
fn another_table_of_the_same_name_is_refused() {
    let table = ours(1..=2);
    let mut other = as_catalog(&table);
    other["table-uuid"] = json!("00000000-0000-4000-8000-000000000099");
    let err = commit_for(&table, &other).unwrap_err().to_string();
    assert!(err.contains("another table"), "{err}");
    assert!(
        err.contains("00000000-0000-4000-8000-000000000099"),
        "{err}"
    );
    let mut missing = as_catalog(&table);
    missing.as_object_mut().unwrap().remove("table-uuid");
    assert!(commit_for(&table, &missing).is_err());
}

#[test]
fn a_snapshot_someone_else_wrote_is_refused_not_removed() {
    let table = ours(1..=2);
    let mut theirs = as_catalog(&ours(1..=2));
    let mut foreign = serde_json::to_value(snapshot(9, false)).unwrap();
    foreign["parent-snapshot-id"] = json!(2);
    theirs["snapshots"].as_array_mut().unwrap().push(foreign);
    theirs["refs"]["main"]["snapshot-id"] = json!(9);
    let err = commit_for(&table, &theirs).unwrap_err().to_string();
    assert!(err.contains("snapshot 9"), "{err}");
    assert!(err.contains("only writer"), "{err}");
}
