use super::*;
use apache_avro::Reader;

#[test]
fn both_schemas_parse_and_keep_their_field_ids() {
    for text in [MANIFEST_SCHEMA, MANIFEST_LIST_SCHEMA] {
        let schema = schema(text);
        let written: serde_json::Value = serde_json::from_str(&schema.canonical_form()).unwrap();
        assert!(written.is_object());
    }
    let bytes = write_manifest(&[], 1, ("{}", 7, "[]")).unwrap();
    let reader = Reader::new(&bytes[..]).unwrap();
    let header = String::from_utf8(reader.user_metadata()["schema-id"].clone()).unwrap();
    assert_eq!(header, "7");
    let avro_schema = serde_json::to_string(reader.writer_schema()).unwrap();
    for id in [
        "\"field-id\":1000",
        "\"field-id\":134",
        "\"element-id\":136",
        "\"field-id\":140",
    ] {
        assert!(avro_schema.contains(id), "{id} missing from {avro_schema}");
    }
}

#[test]
fn a_manifest_and_its_list_read_back_exactly() {
    let files = vec![
        DataFile {
            path: "s3://lake/cuda/dt=2026-11-28/hour=03/compact-r-0.parquet".into(),
            hour: 498_987,
            records: i64::MAX,
            size: 1,
            bounds: vec![(1, vec![0; 8], vec![255; 8])],
        },
        DataFile {
            path: "file:///lake/a \"quoted\"\nname.parquet".into(),
            hour: -1,
            records: 0,
            size: 4,
            bounds: Vec::new(),
        },
    ];
    let bytes = write_manifest(&files, 42, ("{}", 7, "[]")).unwrap();
    assert_eq!(read_manifest(&bytes).unwrap(), files);
    let entries = read_entries(&bytes).unwrap();
    assert_eq!(
        entries
            .iter()
            .map(|e| (e.snapshot_id, e.sequence_number, e.file_sequence_number))
            .collect::<Vec<_>>(),
        vec![(Some(42), None, None); 2],
        "added files inherit their sequence numbers"
    );
    let kept: Vec<KeptFile> = files
        .iter()
        .zip([(7, 1, 1), (i64::MAX, i64::MAX, 0)])
        .map(
            |(file, (snapshot_id, sequence_number, file_sequence_number))| KeptFile {
                file: file.clone(),
                snapshot_id,
                sequence_number,
                file_sequence_number,
            },
        )
        .collect();
    let merged = write_kept_manifest(&kept, ("{}", 7, "[]")).unwrap();
    let read: Vec<KeptFile> = read_entries(&merged)
        .unwrap()
        .into_iter()
        .map(|e| KeptFile {
            file: e.file,
            snapshot_id: e.snapshot_id.unwrap(),
            sequence_number: e.sequence_number.unwrap(),
            file_sequence_number: e.file_sequence_number.unwrap(),
        })
        .collect();
    assert_eq!(read, kept, "kept files state theirs");
    let manifests = vec![ManifestFile {
        path: "file:///lake/iceberg/cuda/metadata/m.avro".into(),
        length: bytes.len() as i64,
        sequence_number: 3,
        added_snapshot_id: 42,
        added_files: 2,
        added_rows: i64::MAX,
        existing_files: i32::MAX,
        existing_rows: 5,
        min_sequence_number: 1,
        hours: (-1, 498_987),
    }];
    let list = write_manifest_list(&manifests, 42, Some(41), 3).unwrap();
    assert_eq!(read_manifest_list(&list).unwrap(), manifests);
    let first = write_manifest_list(&manifests, 42, None, 3).unwrap();
    let reader = Reader::new(&first[..]).unwrap();
    assert_eq!(reader.user_metadata()["parent-snapshot-id"], b"null");
}

#[test]
fn bytes_that_are_not_avro_are_an_error_not_a_panic() {
    assert!(read_manifest(b"Obj\x01 not really").is_err());
    assert!(read_manifest_list(b"").is_err());
}
