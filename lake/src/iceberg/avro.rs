//! The two Avro files of an Iceberg snapshot, format version 2: the manifest (one entry per
//! data file it adds) and the manifest list (one entry per manifest the snapshot reads). The
//! Avro schemas carry Iceberg's field ids, which readers require (DuckDB and pyiceberg refuse
//! manifests without them); they are the specification's, as pyiceberg and Java write them.
//! Every table here has one partition spec: `hour(time)`.

use apache_avro::types::Value;
use apache_avro::{Reader, Schema, Writer};

/// The partition field's name and id in the spec, and its Avro field.
pub const PARTITION_FIELD: &str = "time_hour";
/// The partition field's id (Iceberg numbers partition fields from 1000).
pub const PARTITION_FIELD_ID: i32 = 1000;

const MANIFEST_SCHEMA: &str = r#"{"type": "record", "name": "manifest_entry", "fields": [
 {"name": "status", "field-id": 0, "type": "int"},
 {"name": "snapshot_id", "field-id": 1, "type": ["null", "long"], "default": null},
 {"name": "sequence_number", "field-id": 3, "type": ["null", "long"], "default": null},
 {"name": "file_sequence_number", "field-id": 4, "type": ["null", "long"], "default": null},
 {"name": "data_file", "field-id": 2, "type": {"type": "record", "name": "r2", "fields": [
  {"name": "content", "field-id": 134, "type": "int"},
  {"name": "file_path", "field-id": 100, "type": "string"},
  {"name": "file_format", "field-id": 101, "type": "string"},
  {"name": "partition", "field-id": 102, "type": {"type": "record", "name": "r102", "fields": [
   {"name": "time_hour", "field-id": 1000, "type": ["null", "int"], "default": null}]}},
  {"name": "record_count", "field-id": 103, "type": "long"},
  {"name": "file_size_in_bytes", "field-id": 104, "type": "long"},
  {"name": "column_sizes", "field-id": 108, "type": ["null", {"type": "array", "logicalType": "map", "items": {"type": "record", "name": "k117_v118", "fields": [{"name": "key", "type": "int", "field-id": 117}, {"name": "value", "type": "long", "field-id": 118}]}}], "default": null},
  {"name": "value_counts", "field-id": 109, "type": ["null", {"type": "array", "logicalType": "map", "items": {"type": "record", "name": "k119_v120", "fields": [{"name": "key", "type": "int", "field-id": 119}, {"name": "value", "type": "long", "field-id": 120}]}}], "default": null},
  {"name": "null_value_counts", "field-id": 110, "type": ["null", {"type": "array", "logicalType": "map", "items": {"type": "record", "name": "k121_v122", "fields": [{"name": "key", "type": "int", "field-id": 121}, {"name": "value", "type": "long", "field-id": 122}]}}], "default": null},
  {"name": "nan_value_counts", "field-id": 137, "type": ["null", {"type": "array", "logicalType": "map", "items": {"type": "record", "name": "k138_v139", "fields": [{"name": "key", "type": "int", "field-id": 138}, {"name": "value", "type": "long", "field-id": 139}]}}], "default": null},
  {"name": "lower_bounds", "field-id": 125, "type": ["null", {"type": "array", "logicalType": "map", "items": {"type": "record", "name": "k126_v127", "fields": [{"name": "key", "type": "int", "field-id": 126}, {"name": "value", "type": "bytes", "field-id": 127}]}}], "default": null},
  {"name": "upper_bounds", "field-id": 128, "type": ["null", {"type": "array", "logicalType": "map", "items": {"type": "record", "name": "k129_v130", "fields": [{"name": "key", "type": "int", "field-id": 129}, {"name": "value", "type": "bytes", "field-id": 130}]}}], "default": null},
  {"name": "key_metadata", "field-id": 131, "type": ["null", "bytes"], "default": null},
  {"name": "split_offsets", "field-id": 132, "type": ["null", {"type": "array", "element-id": 133, "items": "long"}], "default": null},
  {"name": "equality_ids", "field-id": 135, "type": ["null", {"type": "array", "element-id": 136, "items": "int"}], "default": null},
  {"name": "sort_order_id", "field-id": 140, "type": ["null", "int"], "default": null}]}}]}"#;

const MANIFEST_LIST_SCHEMA: &str = r#"{"type": "record", "name": "manifest_file", "fields": [
 {"name": "manifest_path", "field-id": 500, "type": "string"},
 {"name": "manifest_length", "field-id": 501, "type": "long"},
 {"name": "partition_spec_id", "field-id": 502, "type": "int"},
 {"name": "content", "field-id": 517, "type": "int"},
 {"name": "sequence_number", "field-id": 515, "type": "long"},
 {"name": "min_sequence_number", "field-id": 516, "type": "long"},
 {"name": "added_snapshot_id", "field-id": 503, "type": "long"},
 {"name": "added_files_count", "field-id": 504, "type": "int"},
 {"name": "existing_files_count", "field-id": 505, "type": "int"},
 {"name": "deleted_files_count", "field-id": 506, "type": "int"},
 {"name": "added_rows_count", "field-id": 512, "type": "long"},
 {"name": "existing_rows_count", "field-id": 513, "type": "long"},
 {"name": "deleted_rows_count", "field-id": 514, "type": "long"},
 {"name": "partitions", "field-id": 507, "type": ["null", {"type": "array", "element-id": 508, "items": {"type": "record", "name": "r508", "fields": [
  {"name": "contains_null", "field-id": 509, "type": "boolean"},
  {"name": "contains_nan", "field-id": 518, "type": ["null", "boolean"], "default": null},
  {"name": "lower_bound", "field-id": 510, "type": ["null", "bytes"], "default": null},
  {"name": "upper_bound", "field-id": 511, "type": ["null", "bytes"], "default": null}]}}], "default": null},
 {"name": "key_metadata", "field-id": 519, "type": ["null", "bytes"], "default": null}]}"#;

/// A data file a manifest adds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataFile {
    /// Its absolute location (`file:///...`, `s3://bucket/...`).
    pub path: String,
    /// Hours since the Unix epoch of its rows (`hour(time)`).
    pub hour: i32,
    /// Rows.
    pub records: i64,
    /// Bytes.
    pub size: i64,
    /// Per column (field id): the least and greatest value in Iceberg's single-value form,
    /// where the file's statistics give them.
    pub bounds: Vec<(i32, Vec<u8>, Vec<u8>)>,
}

/// One entry of a manifest list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManifestFile {
    /// The manifest's absolute location.
    pub path: String,
    /// Its size in bytes.
    pub length: i64,
    /// The sequence number of the snapshot that added it.
    pub sequence_number: i64,
    /// That snapshot's id.
    pub added_snapshot_id: i64,
    /// Data files it adds.
    pub added_files: i32,
    /// Rows of those files.
    pub added_rows: i64,
    /// The least and greatest hour of its files.
    pub hours: (i32, i32),
}

fn schema(text: &str) -> Schema {
    match Schema::parse_str(text) {
        Ok(schema) => schema,
        // A constant of this module; the unit tests parse both.
        Err(err) => unreachable!("an Iceberg Avro schema of this module does not parse: {err}"),
    }
}

fn some(value: Value) -> Value {
    Value::Union(1, Box::new(value))
}

fn none() -> Value {
    Value::Union(0, Box::new(Value::Null))
}

fn record(fields: Vec<(&str, Value)>) -> Value {
    Value::Record(
        fields
            .into_iter()
            .map(|(name, value)| (name.to_string(), value))
            .collect(),
    )
}

fn bound_map(bounds: &[(i32, Vec<u8>, Vec<u8>)], upper: bool) -> Value {
    if bounds.is_empty() {
        return none();
    }
    some(Value::Array(
        bounds
            .iter()
            .map(|(id, low, high)| {
                record(vec![
                    ("key", Value::Int(*id)),
                    (
                        "value",
                        Value::Bytes(if upper { high.clone() } else { low.clone() }),
                    ),
                ])
            })
            .collect(),
    ))
}

/// A manifest adding `files` in snapshot `snapshot_id` (their sequence numbers inherited from
/// the manifest list). `table_schema` and `partition_spec` are the table's, as JSON text.
pub fn write_manifest(
    files: &[DataFile],
    snapshot_id: i64,
    table_schema: &str,
    schema_id: i32,
    partition_spec: &str,
) -> apache_avro::AvroResult<Vec<u8>> {
    let schema = schema(MANIFEST_SCHEMA);
    let mut writer = Writer::new(&schema, Vec::new());
    writer.add_user_metadata("schema".into(), table_schema)?;
    writer.add_user_metadata("schema-id".into(), schema_id.to_string())?;
    writer.add_user_metadata("partition-spec".into(), partition_spec)?;
    writer.add_user_metadata("partition-spec-id".into(), "0")?;
    writer.add_user_metadata("format-version".into(), "2")?;
    writer.add_user_metadata("content".into(), "data")?;
    for file in files {
        let data_file = record(vec![
            ("content", Value::Int(0)),
            ("file_path", Value::String(file.path.clone())),
            ("file_format", Value::String("PARQUET".into())),
            (
                "partition",
                record(vec![(PARTITION_FIELD, some(Value::Int(file.hour)))]),
            ),
            ("record_count", Value::Long(file.records)),
            ("file_size_in_bytes", Value::Long(file.size)),
            ("column_sizes", none()),
            ("value_counts", none()),
            ("null_value_counts", none()),
            ("nan_value_counts", none()),
            ("lower_bounds", bound_map(&file.bounds, false)),
            ("upper_bounds", bound_map(&file.bounds, true)),
            ("key_metadata", none()),
            ("split_offsets", none()),
            ("equality_ids", none()),
            ("sort_order_id", none()),
        ]);
        writer.append(record(vec![
            ("status", Value::Int(1)),
            ("snapshot_id", some(Value::Long(snapshot_id))),
            ("sequence_number", none()),
            ("file_sequence_number", none()),
            ("data_file", data_file),
        ]))?;
    }
    writer.into_inner()
}

/// A manifest list of `manifests` for snapshot `snapshot_id`.
pub fn write_manifest_list(
    manifests: &[ManifestFile],
    snapshot_id: i64,
    parent_snapshot_id: Option<i64>,
    sequence_number: i64,
) -> apache_avro::AvroResult<Vec<u8>> {
    let schema = schema(MANIFEST_LIST_SCHEMA);
    let mut writer = Writer::new(&schema, Vec::new());
    writer.add_user_metadata("snapshot-id".into(), snapshot_id.to_string())?;
    writer.add_user_metadata(
        "parent-snapshot-id".into(),
        parent_snapshot_id.map_or("null".to_string(), |id| id.to_string()),
    )?;
    writer.add_user_metadata("sequence-number".into(), sequence_number.to_string())?;
    writer.add_user_metadata("format-version".into(), "2")?;
    for manifest in manifests {
        let summary = record(vec![
            ("contains_null", Value::Boolean(false)),
            ("contains_nan", none()),
            (
                "lower_bound",
                some(Value::Bytes(manifest.hours.0.to_le_bytes().to_vec())),
            ),
            (
                "upper_bound",
                some(Value::Bytes(manifest.hours.1.to_le_bytes().to_vec())),
            ),
        ]);
        writer.append(record(vec![
            ("manifest_path", Value::String(manifest.path.clone())),
            ("manifest_length", Value::Long(manifest.length)),
            ("partition_spec_id", Value::Int(0)),
            ("content", Value::Int(0)),
            ("sequence_number", Value::Long(manifest.sequence_number)),
            ("min_sequence_number", Value::Long(manifest.sequence_number)),
            ("added_snapshot_id", Value::Long(manifest.added_snapshot_id)),
            ("added_files_count", Value::Int(manifest.added_files)),
            ("existing_files_count", Value::Int(0)),
            ("deleted_files_count", Value::Int(0)),
            ("added_rows_count", Value::Long(manifest.added_rows)),
            ("existing_rows_count", Value::Long(0)),
            ("deleted_rows_count", Value::Long(0)),
            ("partitions", some(Value::Array(vec![summary]))),
            ("key_metadata", none()),
        ]))?;
    }
    writer.into_inner()
}

/// The field `name` of an Avro record, through a union.
fn field<'v>(fields: &'v [(String, Value)], name: &str) -> Option<&'v Value> {
    let value = fields.iter().find(|(n, _)| n == name).map(|(_, v)| v)?;
    Some(match value {
        Value::Union(_, inner) => inner.as_ref(),
        other => other,
    })
}

fn long(fields: &[(String, Value)], name: &str) -> Result<i64, String> {
    match field(fields, name) {
        Some(Value::Long(v)) => Ok(*v),
        Some(Value::Int(v)) => Ok(i64::from(*v)),
        other => Err(format!("{name} is {other:?}, not a number")),
    }
}

fn int(fields: &[(String, Value)], name: &str) -> Result<i32, String> {
    i32::try_from(long(fields, name)?).map_err(|_| format!("{name} is out of range"))
}

fn string(fields: &[(String, Value)], name: &str) -> Result<String, String> {
    match field(fields, name) {
        Some(Value::String(v)) => Ok(v.clone()),
        other => Err(format!("{name} is {other:?}, not a string")),
    }
}

fn records(bytes: &[u8]) -> Result<Vec<Vec<(String, Value)>>, String> {
    let reader = Reader::new(bytes).map_err(|e| e.to_string())?;
    reader
        .map(|value| match value.map_err(|e| e.to_string())? {
            Value::Record(fields) => Ok(fields),
            other => Err(format!("an entry that is not a record: {other:?}")),
        })
        .collect()
}

/// The entries of a manifest list (as [`write_manifest_list`] writes them, or another
/// writer's: the hours are then taken as unknown, `i32::MIN..=i32::MAX`).
pub fn read_manifest_list(bytes: &[u8]) -> Result<Vec<ManifestFile>, String> {
    records(bytes)?
        .iter()
        .map(|fields| {
            let bound = |value: Option<&Value>, default: i32| match value {
                Some(Value::Bytes(b)) if b.len() == 4 => {
                    i32::from_le_bytes([b[0], b[1], b[2], b[3]])
                }
                _ => default,
            };
            let hours = match field(fields, "partitions") {
                Some(Value::Array(parts)) => match parts.first() {
                    Some(Value::Record(part)) => (
                        bound(field(part, "lower_bound"), i32::MIN),
                        bound(field(part, "upper_bound"), i32::MAX),
                    ),
                    _ => (i32::MIN, i32::MAX),
                },
                _ => (i32::MIN, i32::MAX),
            };
            Ok(ManifestFile {
                path: string(fields, "manifest_path")?,
                length: long(fields, "manifest_length")?,
                sequence_number: long(fields, "sequence_number")?,
                added_snapshot_id: long(fields, "added_snapshot_id")?,
                added_files: int(fields, "added_files_count")?,
                added_rows: long(fields, "added_rows_count")?,
                hours,
            })
        })
        .collect()
}

/// The live data files of a manifest (entries not deleted), with their rows, size and hour.
pub fn read_manifest(bytes: &[u8]) -> Result<Vec<DataFile>, String> {
    let mut files = Vec::new();
    for fields in records(bytes)? {
        // 2 = deleted.
        if int(&fields, "status")? == 2 {
            continue;
        }
        let Some(Value::Record(data_file)) = field(&fields, "data_file") else {
            return Err("an entry without data_file".into());
        };
        if int(data_file, "content")? != 0 {
            return Err("a delete file: gpuship's tables hold data files only".into());
        }
        let hour = match field(data_file, "partition") {
            Some(Value::Record(partition)) => int(partition, PARTITION_FIELD).unwrap_or(i32::MIN),
            _ => i32::MIN,
        };
        files.push(DataFile {
            path: string(data_file, "file_path")?,
            hour,
            records: long(data_file, "record_count")?,
            size: long(data_file, "file_size_in_bytes")?,
            bounds: Vec::new(),
        });
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_schemas_parse_and_keep_their_field_ids() {
        for text in [MANIFEST_SCHEMA, MANIFEST_LIST_SCHEMA] {
            let schema = schema(text);
            let written: serde_json::Value =
                serde_json::from_str(&schema.canonical_form()).unwrap();
            assert!(written.is_object());
        }
        let bytes = write_manifest(&[], 1, "{}", 7, "[]").unwrap();
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
        let bytes = write_manifest(&files, 42, "{}", 7, "[]").unwrap();
        let mut expected = files.clone();
        for file in &mut expected {
            file.bounds.clear();
        }
        assert_eq!(read_manifest(&bytes).unwrap(), expected);
        let manifests = vec![ManifestFile {
            path: "file:///lake/iceberg/cuda/metadata/m.avro".into(),
            length: bytes.len() as i64,
            sequence_number: 3,
            added_snapshot_id: 42,
            added_files: 2,
            added_rows: i64::MAX,
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
}
