//! Rewrites the agents' files of one planned output ([`super::plan::split`]) into compacted
//! Parquet: host by host, each host's rows sorted by `host` then `time`, so the `host` and
//! `time` statistics of each row group (at most [`ROW_GROUP_ROWS`] rows) cover a narrow range
//! and engines skip the rest. Rows of different schemas (agents of different versions) go to
//! different files, each with its schema and its `gpuship.*` metadata unchanged.
//!
//! Memory: a host's rows are held (decoded) until sorted, up to `--sort-memory`; a host with
//! more is sorted and written in pieces of that size (each piece sorted; the file then holds the
//! host's rows in several sorted runs). Beside that, the Parquet writer holds one row group
//! encoded, the upload one part, and up to 64 MiB of agents' files are fetched ahead (32 at
//! once).

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use anyhow::Context;
use arrow_array::RecordBatch;
use arrow_ord::sort::{lexsort_to_indices, SortColumn};
use arrow_schema::{ArrowError, SchemaRef};
use arrow_select::concat::concat_batches;
use arrow_select::take::take_record_batch;
use object_store::ObjectStore;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, Encoding, ZstdLevel};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::WriterProperties;
use parquet::schema::types::ColumnPath;
use tokio::runtime::Runtime;

use super::marker::{output_name, Output};
use super::phase::Pauser;
use super::plan::HostGroup;
use super::rule::HourFolder;
use super::upload::Upload;
use crate::storage::{get_many, LakeStorage};

/// Rows per row group of a compacted file: small enough that a row group spans few hosts
/// (pruning by `host`), large enough that a file has few row groups.
pub const ROW_GROUP_ROWS: usize = 128 * 1024;

/// What writing needs.
pub struct Writer<'a> {
    /// Where the agents' files are read.
    pub storage: &'a dyn LakeStorage,
    /// Where the compacted files go (the same lake).
    pub store: Arc<dyn ObjectStore>,
    /// Drives the store's requests.
    pub runtime: &'a Runtime,
    /// Decoded bytes of one host held for sorting, at most.
    pub sort_memory: usize,
    /// Bytes per upload part.
    pub part_size: usize,
    /// The run's name, in the files' names.
    pub run: String,
    /// The test hook.
    pub pauser: Pauser,
}

/// A compacted file being written.
struct OpenFile<'a> {
    name: String,
    writer: ArrowWriter<Upload<'a>>,
    rows: u64,
}

/// Rows read, waiting to be sorted and written, by schema.
#[derive(Default)]
struct Pending {
    batches: Vec<(SchemaRef, Vec<RecordBatch>)>,
    bytes: usize,
}

impl<'a> Writer<'a> {
    /// Writes `groups` (one planned output) of `hour`, naming files from `next_index` on.
    /// Returns the complete files and the rows read from the agents' files.
    pub fn write(
        &mut self,
        hour: &HourFolder,
        groups: &[HostGroup],
        next_index: &mut usize,
    ) -> anyhow::Result<(Vec<Output>, u64)> {
        let mut files: Vec<(SchemaRef, OpenFile<'a>)> = Vec::new();
        let mut pending = Pending::default();
        let mut rows_read = 0u64;
        let mut current = None;
        for chunk in fetch_chunks(groups) {
            let keys: Vec<&str> = chunk.iter().map(|(_, key)| *key).collect();
            let fetched = get_many(self.storage, &keys, FETCH_AT_ONCE);
            for ((group, key), data) in chunk.iter().zip(fetched) {
                // A host's rows are sorted together: the previous host's go out first.
                if current.is_some_and(|c| c != *group) {
                    self.flush(&mut pending, &mut files, hour, next_index)?;
                }
                current = Some(*group);
                let data = data.map_err(anyhow::Error::msg)?;
                let (schema, batches) = decode(data).with_context(|| format!("decoding {key}"))?;
                for batch in batches {
                    rows_read += batch.num_rows() as u64;
                    pending.bytes += batch.get_array_memory_size();
                    match pending.batches.iter_mut().find(|(s, _)| *s == schema) {
                        Some((_, list)) => list.push(batch),
                        None => pending.batches.push((schema.clone(), vec![batch])),
                    }
                }
                if pending.bytes >= self.sort_memory {
                    self.flush(&mut pending, &mut files, hour, next_index)?;
                }
            }
        }
        self.flush(&mut pending, &mut files, hour, next_index)?;
        let mut outputs = Vec::new();
        for (_, file) in files {
            let upload = file
                .writer
                .into_inner()
                .with_context(|| format!("finishing {}", hour.key(&file.name)))?;
            let size = upload
                .finish()
                .with_context(|| format!("completing {}", hour.key(&file.name)))?;
            outputs.push(Output {
                name: file.name,
                size,
                rows: file.rows,
            });
        }
        Ok((outputs, rows_read))
    }

    /// Sorts what is pending and writes it, each schema to its file.
    fn flush(
        &mut self,
        pending: &mut Pending,
        files: &mut Vec<(SchemaRef, OpenFile<'a>)>,
        hour: &HourFolder,
        next_index: &mut usize,
    ) -> anyhow::Result<()> {
        for (schema, batches) in std::mem::take(&mut pending.batches) {
            let sorted = sort_rows(&concat_batches(&schema, &batches)?)?;
            drop(batches);
            let position = match files.iter().position(|(s, _)| *s == schema) {
                Some(position) => position,
                None => {
                    let name = output_name(&self.run, *next_index);
                    *next_index += 1;
                    let path = object_store::path::Path::from(hour.key(&name));
                    let upload = Upload::new(
                        self.store.clone(),
                        self.runtime,
                        path,
                        self.part_size,
                        self.pauser,
                    );
                    let writer =
                        ArrowWriter::try_new(upload, schema.clone(), Some(properties(&schema)))?;
                    files.push((
                        schema.clone(),
                        OpenFile {
                            name,
                            writer,
                            rows: 0,
                        },
                    ));
                    files.len() - 1
                }
            };
            let file = &mut files[position].1;
            file.writer
                .write(&sorted)
                .with_context(|| format!("writing {}", hour.key(&file.name)))?;
            file.rows += sorted.num_rows() as u64;
        }
        pending.bytes = 0;
        Ok(())
    }
}

/// Agents' files fetched at once (on S3 each is a request of tens of milliseconds) ...
const FETCH_AT_ONCE: usize = 32;
/// ... and at most this many of their bytes held fetched, not yet decoded.
const FETCH_BYTES: u64 = 64 << 20;

/// The files of `groups` (each with its group's index) in order, in chunks of at most
/// [`FETCH_AT_ONCE`] files and [`FETCH_BYTES`] bytes (a bigger file is a chunk of its own).
fn fetch_chunks(groups: &[HostGroup]) -> Vec<Vec<(usize, &str)>> {
    let mut chunks: Vec<Vec<(usize, &str)>> = Vec::new();
    let mut bytes = 0;
    for (index, group) in groups.iter().enumerate() {
        for (key, size) in &group.files {
            match chunks.last_mut() {
                Some(chunk) if chunk.len() < FETCH_AT_ONCE && bytes + size <= FETCH_BYTES => {
                    chunk.push((index, key.as_str()));
                    bytes += size;
                }
                _ => {
                    chunks.push(vec![(index, key.as_str())]);
                    bytes = *size;
                }
            }
        }
    }
    chunks
}

/// The schema and rows of one agent's file. The decoder panics on some damaged files instead
/// of failing; such a panic is an error here.
fn decode(data: bytes::Bytes) -> anyhow::Result<(SchemaRef, Vec<RecordBatch>)> {
    std::panic::catch_unwind(AssertUnwindSafe(|| -> anyhow::Result<_> {
        let builder = ParquetRecordBatchReaderBuilder::try_new(data)?.with_batch_size(65_536);
        let schema = builder.schema().clone();
        let batches = builder.build()?.collect::<Result<Vec<_>, ArrowError>>()?;
        Ok((schema, batches))
    }))
    .unwrap_or_else(|_| {
        Err(anyhow::anyhow!(
            "the Parquet decoder failed on a damaged file"
        ))
    })
}

/// `batch` sorted by `host`, then `time` (or `time_ns` in files without `time`): the columns
/// the lake's readers filter on. Columns it does not have are left out of the key.
pub fn sort_rows(batch: &RecordBatch) -> Result<RecordBatch, ArrowError> {
    let time = if batch.column_by_name("time").is_some() {
        "time"
    } else {
        "time_ns"
    };
    let columns: Vec<SortColumn> = ["host", time]
        .into_iter()
        .filter_map(|name| batch.column_by_name(name))
        .map(|values| SortColumn {
            values: values.clone(),
            options: None,
        })
        .collect();
    if columns.is_empty() || batch.num_rows() < 2 {
        return Ok(batch.clone());
    }
    let indices = lexsort_to_indices(&columns, None)?;
    take_record_batch(batch, &indices)
}

/// zstd, row groups of [`ROW_GROUP_ROWS`], timestamps delta-encoded (as the agents write
/// them), and the agents' file metadata (`gpuship.schema_version`, `gpuship.kind`) carried
/// over from the schema.
fn properties(schema: &SchemaRef) -> WriterProperties {
    let metadata: Vec<KeyValue> = schema
        .metadata()
        .iter()
        .map(|(k, v)| KeyValue::new(k.clone(), v.clone()))
        .collect();
    let mut builder = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        .set_max_row_group_row_count(Some(ROW_GROUP_ROWS))
        .set_key_value_metadata(Some(metadata))
        .set_created_by(format!(
            "gpuship-lake compact {}",
            env!("CARGO_PKG_VERSION")
        ));
    for column in ["time", "time_ns"] {
        if schema.field_with_name(column).is_ok() {
            builder = builder
                .set_column_dictionary_enabled(ColumnPath::from(column), false)
                .set_column_encoding(ColumnPath::from(column), Encoding::DELTA_BINARY_PACKED);
        }
    }
    builder.build()
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Int64Array, StringArray};
    use arrow_schema::{DataType, Field, Schema};

    #[test]
    fn files_are_fetched_in_bounded_chunks_in_order() {
        let group = |host: &str, sizes: &[u64]| HostGroup {
            host: host.into(),
            files: sizes
                .iter()
                .enumerate()
                .map(|(i, s)| (format!("{host}{i}"), *s))
                .collect(),
        };
        let groups = vec![group("a", &[10; 40]), group("b", &[FETCH_BYTES, 1])];
        let chunks = fetch_chunks(&groups);
        let lens: Vec<usize> = chunks.iter().map(Vec::len).collect();
        assert_eq!(
            lens,
            [32, 8, 1, 1],
            "32 files, then the rest of a; b0 alone by size"
        );
        assert_eq!(chunks[1][7], (0, "a39"));
        assert_eq!(chunks[2], [(1, "b0")]);
        assert_eq!(chunks[3], [(1, "b1")]);
    }

    #[test]
    fn rows_sort_by_host_then_time() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("host", DataType::Utf8, false),
            Field::new("time_ns", DataType::Int64, false),
        ]));
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(StringArray::from(vec!["b", "a", "b", "a"])),
                Arc::new(Int64Array::from(vec![2, 9, 1, 3])),
            ],
        )
        .unwrap();
        let sorted = sort_rows(&batch).unwrap();
        let hosts = sorted
            .column(0)
            .as_any()
            .downcast_ref::<StringArray>()
            .unwrap();
        let times = sorted
            .column(1)
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap();
        assert_eq!(
            hosts.iter().flatten().collect::<Vec<_>>(),
            ["a", "a", "b", "b"]
        );
        assert_eq!(times.values(), &[3, 9, 1, 2]);
    }
}
