use std::collections::HashMap;

use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray};
use arrow_schema::{DataType, Field, Schema, TimeUnit};
use parquet::arrow::ArrowWriter;

use super::*;
use crate::iceberg::read::{file_name, get_uri, manifests, manifests_of};
use crate::local::LocalStorage;

/// A compacted-like file at `key` under `root`: `rows` rows of schema version `version`
/// (version 7 adds the `extra` column).
fn write_file(root: &std::path::Path, key: &str, version: i32, rows: i64) {
    let mut fields = vec![
        Field::new(
            "time",
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            false,
        ),
        Field::new("host", DataType::Utf8, false),
    ];
    let mut columns: Vec<ArrayRef> = vec![
        Arc::new(TimestampMicrosecondArray::from_iter_values(0..rows).with_timezone("UTC")),
        Arc::new(StringArray::from_iter_values(
            (0..rows).map(|i| format!("h{i}")),
        )),
    ];
    if version >= 7 {
        fields.push(Field::new("extra", DataType::Int64, true));
        columns.push(Arc::new(Int64Array::from_iter_values(0..rows)));
    }
    let schema = Arc::new(Schema::new(fields).with_metadata(HashMap::from([(
        "gpuship.schema_version".to_string(),
        version.to_string(),
    )])));
    let batch = RecordBatch::try_new(schema.clone(), columns).unwrap();
    let path = root.join(key);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let mut writer =
        ArrowWriter::try_new(std::fs::File::create(path).unwrap(), schema, None).unwrap();
    writer.write(&batch).unwrap();
    writer.close().unwrap();
}

/// A lake in `root` and a runtime to drive its store.
fn open(root: &std::path::Path) -> (LocalStorage, tokio::runtime::Runtime) {
    let storage = LocalStorage::open(root).unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    (storage, runtime)
}

/// `kind`'s table in that lake.
fn table<'a>(
    storage: &'a LocalStorage,
    runtime: &'a tokio::runtime::Runtime,
    kind: EventKind,
) -> Table<'a> {
    Table {
        storage,
        store: storage.object_store(),
        runtime,
        kind,
        merge_manifests_at: crate::iceberg::merge::MERGE_MANIFESTS_AT,
        keep_snapshots: crate::iceberg::expire::KEEP_SNAPSHOTS,
        catalog: None,
    }
}

#[test]
fn appends_evolve_the_schema_and_never_add_a_marker_twice() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let (storage, runtime) = open(root);
    let table = table(&storage, &runtime, EventKind::Xid);
    assert!(table.load().unwrap().is_none());
    let old = "xid/dt=2026-11-28/hour=01/compact-a-0.parquet";
    let new = "xid/dt=2026-11-28/hour=02/compact-b-0.parquet";
    write_file(root, old, 6, 3);
    write_file(root, new, 7, 5);
    let file = |key: &str, hour| read_new_file(&storage, key, hour).unwrap();
    assert_eq!(file(old, 1).rows, 3);
    assert_eq!(file(old, 1).time_range, Some((0, 2)));
    assert_eq!(
        file(old, 1).host_range,
        Some((b"h0".to_vec(), b"h2".to_vec()))
    );

    let first = vec![(
        "xid/dt=2026-11-28/hour=01/_compaction-a.json".to_string(),
        vec![file(old, 1)],
    )];
    let done = table.append(&first, Pauser::default(), 1_000).unwrap();
    assert_eq!((done.version, done.files, done.rows), (1, 1, 3));
    // Again: the marker is there already; nothing is written.
    assert_eq!(
        table.append(&first, Pauser::default(), 2_000).unwrap(),
        Appended::default()
    );
    // A run killed between its commit and the hint: the next append writes the hint.
    let hint_path = root.join("iceberg/xid/metadata/version-hint.text");
    std::fs::write(&hint_path, "0").unwrap();
    assert_eq!(
        table.append(&first, Pauser::default(), 2_500).unwrap(),
        Appended::default()
    );
    assert_eq!(std::fs::read_to_string(&hint_path).unwrap(), "1");

    let second = vec![
        first[0].clone(),
        (
            "xid/dt=2026-11-28/hour=02/_compaction-b.json".to_string(),
            vec![file(new, 2)],
        ),
    ];
    let done = table.append(&second, Pauser::default(), 3_000).unwrap();
    assert_eq!((done.version, done.files, done.rows), (2, 1, 5));
    let (version, metadata) = table.load().unwrap().unwrap();
    assert_eq!(version, 2);
    let ids: Vec<i64> = metadata
        .schemas
        .iter()
        .map(|s| s["schema-id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, [6, 7], "one schema per version");
    assert_eq!(metadata.current_schema_id, 7);
    let current = metadata.current_schema().unwrap();
    assert_eq!(current.field_id("extra"), Some(3));
    assert_eq!(current.field_id("host"), Some(2));
    assert_eq!(metadata.snapshots[1].summary["total-records"], "8");
    assert_eq!(metadata.committed_markers().len(), 2);
    let hint = std::fs::read_to_string(root.join("iceberg/xid/metadata/version-hint.text"));
    assert_eq!(hint.unwrap(), "2");
    let mut files = current_files(&storage, EventKind::Xid).unwrap();
    files.sort_by_key(|f| f.hour);
    let paths: Vec<Option<String>> = files.iter().map(|f| storage.key_of(&f.path)).collect();
    assert_eq!(paths, [Some(old.to_string()), Some(new.to_string())]);
    assert_eq!(files.iter().map(|f| f.records).sum::<i64>(), 8);
}

#[test]
fn a_metadata_file_that_exists_is_never_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let (storage, runtime) = open(root);
    let table = table(&storage, &runtime, EventKind::Cuda);
    let key = "cuda/dt=2026-11-28/hour=01/compact-a-0.parquet";
    write_file(root, key, 7, 2);
    let files = vec![(
        "cuda/dt=2026-11-28/hour=01/_compaction-a.json".to_string(),
        vec![read_new_file(&storage, key, 1).unwrap()],
    )];
    // Another writer's v1 appears after this run listed none: its commit must fail.
    let metadata = root.join("iceberg/cuda/metadata");
    std::fs::create_dir_all(&metadata).unwrap();
    std::fs::write(metadata.join("v1.metadata.json.other"), b"x").unwrap();
    let put = table.put(
        "iceberg/cuda/metadata/v1.metadata.json",
        b"{}".to_vec(),
        PutMode::Create,
    );
    assert!(put.is_ok());
    let again = table.put(
        "iceberg/cuda/metadata/v1.metadata.json",
        b"[]".to_vec(),
        PutMode::Create,
    );
    assert!(
        matches!(again, Err(object_store::Error::AlreadyExists { .. })),
        "{again:?}"
    );
    assert_eq!(
        std::fs::read(metadata.join("v1.metadata.json")).unwrap(),
        b"{}"
    );
    // A damaged newest metadata file stops the commit with its name.
    let err = table.append(&files, Pauser::default(), 1).unwrap_err();
    assert!(
        format!("{err:#}").contains("v1.metadata.json is not Iceberg"),
        "{err:#}"
    );
}

#[test]
fn only_plain_version_names_count() {
    assert_eq!(version_of("v1.metadata.json"), Some(1));
    assert_eq!(
        version_of("v18446744073709551615.metadata.json"),
        Some(u64::MAX)
    );
    for name in [
        "v.metadata.json",
        "v-1.metadata.json",
        "v1.metadata.json.tmp",
        "00001-abc.metadata.json",
        "v99999999999999999999.metadata.json",
        "v1 .metadata.json",
    ] {
        assert_eq!(version_of(name), None, "{name}");
    }
}

/// Five runs under a limit of 3 manifests: the fourth commit merges the first three into one,
/// the fifth lists that one, the fourth's and its own. Every snapshot still lists its files.
#[test]
fn a_commit_past_the_limit_merges_the_previous_manifests_and_loses_no_file() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let (storage, runtime) = open(root);
    let mut table = table(&storage, &runtime, EventKind::Xid);
    table.merge_manifests_at = 3;
    let mut listed_per_version = Vec::new();
    for hour in 1..=5i32 {
        let key = format!("xid/dt=2026-11-28/hour=0{hour}/compact-{hour}-0.parquet");
        write_file(root, &key, 7, i64::from(hour));
        let marker = format!("xid/dt=2026-11-28/hour=0{hour}/_compaction-{hour}.json");
        let file = read_new_file(&storage, &key, hour).unwrap();
        let done = table
            .append(&[(marker, vec![file])], Pauser::default(), 1_000)
            .unwrap();
        assert_eq!(done.version, hour as u64);
        let (_, metadata) = table.load().unwrap().unwrap();
        let listed = manifests(&storage, &metadata).unwrap();
        listed_per_version.push(listed.len());
        let files = current_files(&storage, EventKind::Xid).unwrap();
        assert_eq!(files.len(), hour as usize, "v{hour}");
        assert_eq!(
            files.iter().map(|f| f.records).sum::<i64>(),
            i64::from(hour * (hour + 1) / 2),
            "v{hour}"
        );
        assert!(files.iter().all(|f| !f.bounds.is_empty()), "bounds kept");
    }
    assert_eq!(listed_per_version, [1, 2, 3, 2, 3]);
    let (_, metadata) = table.load().unwrap().unwrap();
    let fourth = &metadata.snapshots[3];
    assert_eq!(fourth.summary["manifests-replaced"], "3");
    assert_eq!(fourth.summary["manifests-created"], "2");
    let list = get_uri(&storage, &fourth.manifest_list).unwrap();
    let entries = avro::read_manifest_list(&list).unwrap();
    let merged = &entries[0];
    assert_eq!(
        (
            merged.existing_files,
            merged.existing_rows,
            merged.added_files
        ),
        (3, 6, 0)
    );
    assert_eq!((merged.min_sequence_number, merged.sequence_number), (1, 4));
    // Each merged file keeps the snapshot and sequence number it was added with.
    let kept = avro::read_entries(&get_uri(&storage, &merged.path).unwrap()).unwrap();
    for (entry, snapshot) in kept.iter().zip(&metadata.snapshots) {
        assert_eq!(entry.snapshot_id, Some(snapshot.snapshot_id));
        assert_eq!(entry.sequence_number, Some(snapshot.sequence_number));
    }
    // The snapshots before the merge still list their own manifests.
    let second = get_uri(&storage, &metadata.snapshots[1].manifest_list).unwrap();
    assert_eq!(avro::read_manifest_list(&second).unwrap().len(), 2);
    assert_eq!(metadata.committed_markers().len(), 5);
}

/// Five runs keeping 2 snapshots (merging at 2): the metadata keeps the newest two snapshots
/// and two earlier metadata files; the folder keeps exactly the Avro files they read (a killed
/// run's stray manifest an hour old goes too, a young one stays); every file and marker is
/// still in the table.
#[test]
fn expired_snapshots_leave_the_files_and_markers_and_their_metadata_goes() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let (storage, runtime) = open(root);
    let mut table = table(&storage, &runtime, EventKind::Xid);
    (table.merge_manifests_at, table.keep_snapshots) = (2, 2);
    let metadata_dir = root.join("iceberg/xid/metadata");
    let mut appended = Vec::new();
    for hour in 1..=5i32 {
        let key = format!("xid/dt=2026-11-28/hour=0{hour}/compact-r{hour}-0000.parquet");
        write_file(root, &key, 7, i64::from(hour));
        let marker = format!("xid/dt=2026-11-28/hour=0{hour}/_compaction-r{hour}.json");
        appended.push((marker, vec![read_new_file(&storage, &key, hour).unwrap()]));
        if hour == 5 {
            // A killed run's manifest, two hours old, and one just written (perhaps another
            // run's, about to commit): the first goes, the second stays.
            let old = metadata_dir.join("0000-stray-m0.avro");
            std::fs::write(&old, b"killed").unwrap();
            let two_hours = std::time::Duration::from_secs(7_200);
            std::fs::File::options()
                .write(true)
                .open(&old)
                .unwrap()
                .set_modified(std::time::SystemTime::now() - two_hours)
                .unwrap();
            std::fs::write(metadata_dir.join("0001-young-m0.avro"), b"fresh").unwrap();
        }
        table
            .append(&appended[hour as usize - 1..], Pauser::default(), 1_000)
            .unwrap();
    }
    let (version, metadata) = table.load().unwrap().unwrap();
    assert_eq!(version, 5);
    assert_eq!(metadata.snapshots.len(), 2);
    assert_eq!(metadata.snapshot_log.len(), 2);
    assert_eq!(metadata.metadata_log.len(), 2);
    let files = current_files(&storage, EventKind::Xid).unwrap();
    assert_eq!(files.len(), 5);
    assert_eq!(files.iter().map(|f| f.records).sum::<i64>(), 15);
    // Markers of the expired snapshots come from the files: nothing is added again.
    assert_eq!(table.committed_markers().unwrap().len(), 5);
    assert_eq!(
        table.append(&appended, Pauser::default(), 2_000).unwrap(),
        Appended::default()
    );
    let mut names: Vec<String> = std::fs::read_dir(&metadata_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let mut read: BTreeSet<String> = BTreeSet::new();
    for snapshot in &metadata.snapshots {
        read.insert(file_name(&snapshot.manifest_list).to_string());
        for manifest in manifests_of(&storage, snapshot).unwrap() {
            read.insert(file_name(&manifest.path).to_string());
        }
    }
    let mut expected: Vec<String> = read.into_iter().collect();
    expected.extend(
        [
            "0001-young-m0.avro",
            "v3.metadata.json",
            "v4.metadata.json",
            "v5.metadata.json",
            VERSION_HINT,
        ]
        .map(String::from),
    );
    expected.sort();
    assert_eq!(names, expected);
}
