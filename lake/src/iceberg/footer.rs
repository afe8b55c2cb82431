//! A compacted file's facts for the Iceberg table, read from its Parquet footer alone (one or
//! two requests on S3): rows, size, Arrow schema, gpuship's schema version, and the `time` and
//! `host` bounds its row groups' statistics give.

use anyhow::Context;
use arrow_schema::Schema;
use parquet::file::metadata::{ParquetMetaData, ParquetMetaDataReader};
use parquet::file::statistics::Statistics;

use crate::storage::LakeStorage;

/// The file-metadata key under which the agents' Parquet sink writes the schema version.
const SCHEMA_VERSION_KEY: &str = "gpuship.schema_version";

/// A compacted file to add, read from its footer.
#[derive(Debug, Clone)]
pub struct NewFile {
    /// Its key in the lake.
    pub key: String,
    /// Hours since the epoch of its hour folder.
    pub hour: i32,
    /// Rows (from its footer).
    pub rows: u64,
    /// Bytes.
    pub size: u64,
    /// Its columns.
    pub schema: Schema,
    /// `gpuship.schema_version` of its metadata.
    pub schema_version: i32,
    /// Least and greatest `time` (µs) and `host`, where every row group's statistics say.
    pub time_range: Option<(i64, i64)>,
    /// Least and greatest host.
    pub host_range: Option<(Vec<u8>, Vec<u8>)>,
}

/// A compacted file's facts from its footer (one or two requests on S3).
pub fn read_new_file(storage: &dyn LakeStorage, key: &str, hour: i32) -> anyhow::Result<NewFile> {
    let size = storage
        .stat(key)
        .with_context(|| format!("reading the size of {key}"))?
        .size;
    anyhow::ensure!(size >= 12, "{key}: {size} bytes is no Parquet file");
    let tail = storage.tail(key, size, 8)?;
    anyhow::ensure!(&tail[4..] == b"PAR1", "{key}: not a Parquet file");
    let footer_len = u64::from(u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]));
    anyhow::ensure!(
        footer_len + 8 <= size,
        "{key}: a footer longer than the file"
    );
    let footer = storage.tail(key, size, footer_len + 8)?;
    let metadata = ParquetMetaDataReader::decode_metadata(&footer[..footer_len as usize])
        .with_context(|| format!("{key}: its footer"))?;
    let file = metadata.file_metadata();
    let schema =
        parquet::arrow::parquet_to_arrow_schema(file.schema_descr(), file.key_value_metadata())
            .with_context(|| format!("{key}: its schema"))?;
    // The version is in the footer's key-value metadata (what the agents write) or in the
    // embedded Arrow schema's metadata (what any Arrow writer keeps); 1 when neither says.
    let schema_version = schema
        .metadata()
        .get(SCHEMA_VERSION_KEY)
        .cloned()
        .or_else(|| {
            file.key_value_metadata()
                .into_iter()
                .flatten()
                .find(|kv| kv.key == SCHEMA_VERSION_KEY)
                .and_then(|kv| kv.value.clone())
        })
        .and_then(|value| value.parse().ok())
        .unwrap_or(1);
    Ok(NewFile {
        key: key.to_string(),
        hour,
        rows: u64::try_from(file.num_rows()).unwrap_or(0),
        size,
        schema,
        schema_version,
        time_range: time_range(&metadata),
        host_range: host_range(&metadata),
    })
}

/// The index of the top-level leaf column `name`.
fn column(metadata: &ParquetMetaData, name: &str) -> Option<usize> {
    metadata
        .file_metadata()
        .schema_descr()
        .columns()
        .iter()
        .position(|c| c.path().string() == name)
}

fn time_range(metadata: &ParquetMetaData) -> Option<(i64, i64)> {
    let index = column(metadata, "time")?;
    let mut range: Option<(i64, i64)> = None;
    for group in metadata.row_groups() {
        let Some(Statistics::Int64(stats)) = group.column(index).statistics() else {
            return None;
        };
        let (low, high) = (*stats.min_opt()?, *stats.max_opt()?);
        range = Some(range.map_or((low, high), |(l, h)| (l.min(low), h.max(high))));
    }
    range
}

fn host_range(metadata: &ParquetMetaData) -> Option<(Vec<u8>, Vec<u8>)> {
    let index = column(metadata, "host")?;
    let mut range: Option<(Vec<u8>, Vec<u8>)> = None;
    for group in metadata.row_groups() {
        let Some(Statistics::ByteArray(stats)) = group.column(index).statistics() else {
            return None;
        };
        // A truncated bound is not the column's value: no bound then.
        if !stats.min_is_exact() || !stats.max_is_exact() {
            return None;
        }
        let low = stats.min_opt()?.data().to_vec();
        let high = stats.max_opt()?.data().to_vec();
        range = Some(match range {
            None => (low, high),
            Some((l, h)) => (l.min(low), h.max(high)),
        });
    }
    range
}
