//! Rewrites the agents' files of one planned output ([`super::plan::split`]) into compacted
//! Parquet: host by host, each host's rows sorted by `host` then `time`, so the `host` and
//! `time` statistics of each row group (at most [`ROW_GROUP_ROWS`] rows) cover a narrow range
//! and engines skip the rest. Rows of different schemas (agents of different versions) go to
//! different files, each with its schema and its `gpuship.*` metadata unchanged.
//!
//! For a `cuda_stats` hour the rows also go to its hourly roll-up ([`super::rollup`]), written
//! host by host into `rollup-<run>-<n>.parquet` in the hour's roll-up folder, one file per
//! schema, completed after the compacted files.
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
use super::rollup::{rollup_name, HostRollup};
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
    /// The hour's roll-up, for a `cuda_stats` hour.
    pub rollup: Option<RollupFiles<'a>>,
}

/// The roll-up of one hour being written: per schema, the current host's groups and the file.
pub struct RollupFiles<'a> {
    /// `cuda_stats_hourly/dt=.../hour=HH`.
    folder: String,
    per_schema: Vec<(SchemaRef, HostRollup, Option<OpenFile<'a>>)>,
    next_index: usize,
}

impl RollupFiles<'_> {
    /// A roll-up written into `folder`.
    pub fn new(folder: String) -> Self {
        Self {
            folder,
            per_schema: Vec::new(),
            next_index: 0,
        }
    }
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
                    self.end_host()?;
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
        self.end_host()?;
        let outputs = files
            .into_iter()
            .map(|(_, file)| finish(file, &hour.folder))
            .collect::<anyhow::Result<Vec<_>>>()?;
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
                    let file = self.open(&hour.folder, name, &schema)?;
                    files.push((schema.clone(), file));
                    files.len() - 1
                }
            };
            let file = &mut files[position].1;
            file.writer
                .write(&sorted)
                .with_context(|| format!("writing {}", hour.key(&file.name)))?;
            file.rows += sorted.num_rows() as u64;
            if let Some(rollup) = self.rollup.as_mut() {
                rollup.add(&schema, &sorted)?;
            }
        }
        pending.bytes = 0;
        Ok(())
    }

    /// Starts the file `name` in `folder`.
    fn open(&self, folder: &str, name: String, schema: &SchemaRef) -> anyhow::Result<OpenFile<'a>> {
        let path = object_store::path::Path::from(format!("{folder}/{name}"));
        let upload = Upload::new(
            self.store.clone(),
            self.runtime,
            path,
            self.part_size,
            self.pauser,
        );
        let writer = ArrowWriter::try_new(upload, schema.clone(), Some(properties(schema)))?;
        Ok(OpenFile {
            name,
            writer,
            rows: 0,
        })
    }

    /// Writes the roll-up rows of the host just done.
    fn end_host(&mut self) -> anyhow::Result<()> {
        let Some(mut rollup) = self.rollup.take() else {
            return Ok(());
        };
        let result = (|| -> anyhow::Result<()> {
            for (schema, host, file) in &mut rollup.per_schema {
                let Some(rows) = host.drain()? else { continue };
                if file.is_none() {
                    let name = rollup_name(&self.run, rollup.next_index);
                    rollup.next_index += 1;
                    *file = Some(self.open(&rollup.folder, name, schema)?);
                }
                let file = file.as_mut().expect("opened just above");
                file.writer
                    .write(&rows)
                    .with_context(|| format!("writing {}/{}", rollup.folder, file.name))?;
                file.rows += rows.num_rows() as u64;
            }
            Ok(())
        })();
        self.rollup = Some(rollup);
        result
    }

    /// Completes the roll-up files (after every output of the hour is written) and returns
    /// them; none for an hour without a roll-up.
    pub fn finish_rollups(&mut self) -> anyhow::Result<Vec<Output>> {
        self.end_host()?;
        let Some(rollup) = self.rollup.take() else {
            return Ok(Vec::new());
        };
        let mut outputs = Vec::new();
        for (_, _, file) in rollup.per_schema {
            if let Some(file) = file {
                outputs.push(finish(file, &rollup.folder)?);
            }
        }
        Ok(outputs)
    }
}

impl RollupFiles<'_> {
    /// Adds sorted rows of `schema` to the current host's roll-up.
    fn add(&mut self, schema: &SchemaRef, rows: &RecordBatch) -> anyhow::Result<()> {
        let position = match self.per_schema.iter().position(|(s, _, _)| s == schema) {
            Some(position) => position,
            None => {
                let rollup = HostRollup::new(schema.clone());
                self.per_schema.push((schema.clone(), rollup, None));
                self.per_schema.len() - 1
            }
        };
        self.per_schema[position].1.add(rows)?;
        Ok(())
    }
}

/// Completes `file` (in `folder`) and says what it holds.
fn finish(file: OpenFile<'_>, folder: &str) -> anyhow::Result<Output> {
    let key = format!("{folder}/{}", file.name);
    let upload = file
        .writer
        .into_inner()
        .with_context(|| format!("finishing {key}"))?;
    let size = upload
        .finish()
        .with_context(|| format!("completing {key}"))?;
    Ok(Output {
        name: file.name,
        size,
        rows: file.rows,
    })
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
mod tests;
