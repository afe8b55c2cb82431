//! Reading the manifest and the manifest list back (gpuship's own, and other writers'): the
//! live entries with their files' rows, sizes, hours and bounds.

use apache_avro::types::Value;
use apache_avro::Reader;

use super::{DataFile, Entry, ManifestFile, PARTITION_FIELD};

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
            let sequence_number = long(fields, "sequence_number")?;
            Ok(ManifestFile {
                path: string(fields, "manifest_path")?,
                length: long(fields, "manifest_length")?,
                sequence_number,
                added_snapshot_id: long(fields, "added_snapshot_id")?,
                added_files: int(fields, "added_files_count")?,
                added_rows: long(fields, "added_rows_count")?,
                existing_files: int(fields, "existing_files_count")?,
                existing_rows: long(fields, "existing_rows_count")?,
                min_sequence_number: long(fields, "min_sequence_number").unwrap_or(sequence_number),
                hours,
            })
        })
        .collect()
}

/// The live data files of a manifest (entries not deleted), with their rows, size, hour and
/// bounds.
pub fn read_manifest(bytes: &[u8]) -> Result<Vec<DataFile>, String> {
    Ok(read_entries(bytes)?.into_iter().map(|e| e.file).collect())
}

/// The live entries of a manifest (not deleted).
pub fn read_entries(bytes: &[u8]) -> Result<Vec<Entry>, String> {
    let mut entries = Vec::new();
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
        let optional = |name: &str| match field(&fields, name) {
            Some(Value::Null) | None => Ok(None),
            Some(_) => long(&fields, name).map(Some),
        };
        entries.push(Entry {
            file: DataFile {
                path: string(data_file, "file_path")?,
                hour,
                records: long(data_file, "record_count")?,
                size: long(data_file, "file_size_in_bytes")?,
                bounds: bounds(data_file),
            },
            snapshot_id: optional("snapshot_id")?,
            sequence_number: optional("sequence_number")?,
            file_sequence_number: optional("file_sequence_number")?,
        });
    }
    Ok(entries)
}

/// The `lower_bounds` and `upper_bounds` of a data file, paired by field id (a field with one
/// side only is left out).
fn bounds(data_file: &[(String, Value)]) -> Vec<(i32, Vec<u8>, Vec<u8>)> {
    let map = |name: &str| -> Vec<(i32, Vec<u8>)> {
        let Some(Value::Array(items)) = field(data_file, name) else {
            return Vec::new();
        };
        items
            .iter()
            .filter_map(|item| match item {
                Value::Record(pair) => match (field(pair, "key"), field(pair, "value")) {
                    (Some(Value::Int(id)), Some(Value::Bytes(bytes))) => Some((*id, bytes.clone())),
                    _ => None,
                },
                _ => None,
            })
            .collect()
    };
    let upper = map("upper_bounds");
    map("lower_bounds")
        .into_iter()
        .filter_map(|(id, low)| {
            let (_, high) = upper.iter().find(|(u, _)| *u == id)?;
            Some((id, low, high.clone()))
        })
        .collect()
}
