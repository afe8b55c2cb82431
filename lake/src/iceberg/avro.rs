//! The two Avro files of an Iceberg snapshot, format version 2: the manifest (one entry per
//! data file it adds) and the manifest list (one entry per manifest the snapshot reads). The
//! Avro schemas carry Iceberg's field ids, which readers require (DuckDB and pyiceberg refuse
//! manifests without them); they are the specification's, as pyiceberg and Java write them.
//! Every table here has one partition spec: `hour(time)`.

use apache_avro::types::Value;
use apache_avro::{Schema, Writer};

/// The partition field's name and id in the spec, and its Avro field.
pub const PARTITION_FIELD: &str = "time_hour";
/// The partition field's id (Iceberg numbers partition fields from 1000).
pub const PARTITION_FIELD_ID: i32 = 1000;

mod read;
mod schemas;
pub use read::{read_entries, read_manifest, read_manifest_list};
use schemas::{MANIFEST_LIST_SCHEMA, MANIFEST_SCHEMA};

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
    /// Data files it keeps from earlier snapshots (a merged manifest), and their rows.
    pub existing_files: i32,
    pub existing_rows: i64,
    /// The least sequence number of its files (its own for a manifest of added files).
    pub min_sequence_number: i64,
    /// The least and greatest hour of its files.
    pub hours: (i32, i32),
}

/// A data file as a manifest entry holds it: the file, and the snapshot that added it and its
/// sequence numbers where the entry states them (an added file's are inherited from the
/// manifest list when absent).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub file: DataFile,
    pub snapshot_id: Option<i64>,
    pub sequence_number: Option<i64>,
    pub file_sequence_number: Option<i64>,
}

/// A data file an earlier snapshot added, kept by a merged manifest (status EXISTING, which
/// states the snapshot and sequence numbers instead of inheriting them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeptFile {
    pub file: DataFile,
    pub snapshot_id: i64,
    pub sequence_number: i64,
    pub file_sequence_number: i64,
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

/// What a manifest's header says of its table: the schema as JSON text, its id, and the
/// partition spec's fields as JSON text.
pub type ManifestHeader<'a> = (&'a str, i32, &'a str);

/// A manifest adding `files` in snapshot `snapshot_id` (their sequence numbers inherited from
/// the manifest list).
pub fn write_manifest(
    files: &[DataFile],
    snapshot_id: i64,
    header: ManifestHeader<'_>,
) -> apache_avro::AvroResult<Vec<u8>> {
    let entries = files.iter().map(|file| {
        let status = (1, some(Value::Long(snapshot_id)), none(), none());
        (status, file)
    });
    write_entries(entries, header)
}

/// A manifest keeping `files` of earlier snapshots (a merge of their manifests), each with
/// the snapshot and sequence numbers it was added with.
pub fn write_kept_manifest(
    files: &[KeptFile],
    header: ManifestHeader<'_>,
) -> apache_avro::AvroResult<Vec<u8>> {
    let entries = files.iter().map(|kept| {
        let status = (
            0,
            some(Value::Long(kept.snapshot_id)),
            some(Value::Long(kept.sequence_number)),
            some(Value::Long(kept.file_sequence_number)),
        );
        (status, &kept.file)
    });
    write_entries(entries, header)
}

/// A manifest of entries `((status, snapshot_id, sequence_number, file_sequence_number), file)`.
fn write_entries<'f>(
    entries: impl Iterator<Item = ((i32, Value, Value, Value), &'f DataFile)>,
    (table_schema, schema_id, partition_spec): ManifestHeader<'_>,
) -> apache_avro::AvroResult<Vec<u8>> {
    let schema = schema(MANIFEST_SCHEMA);
    let mut writer = Writer::new(&schema, Vec::new());
    writer.add_user_metadata("schema".into(), table_schema)?;
    writer.add_user_metadata("schema-id".into(), schema_id.to_string())?;
    writer.add_user_metadata("partition-spec".into(), partition_spec)?;
    writer.add_user_metadata("partition-spec-id".into(), "0")?;
    writer.add_user_metadata("format-version".into(), "2")?;
    writer.add_user_metadata("content".into(), "data")?;
    for ((status, snapshot_id, sequence_number, file_sequence_number), file) in entries {
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
            ("status", Value::Int(status)),
            ("snapshot_id", snapshot_id),
            ("sequence_number", sequence_number),
            ("file_sequence_number", file_sequence_number),
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
            (
                "min_sequence_number",
                Value::Long(manifest.min_sequence_number),
            ),
            ("added_snapshot_id", Value::Long(manifest.added_snapshot_id)),
            ("added_files_count", Value::Int(manifest.added_files)),
            ("existing_files_count", Value::Int(manifest.existing_files)),
            ("deleted_files_count", Value::Int(0)),
            ("added_rows_count", Value::Long(manifest.added_rows)),
            ("existing_rows_count", Value::Long(manifest.existing_rows)),
            ("deleted_rows_count", Value::Long(0)),
            ("partitions", some(Value::Array(vec![summary]))),
            ("key_metadata", none()),
        ]))?;
    }
    writer.into_inner()
}

#[cfg(test)]
mod tests;
