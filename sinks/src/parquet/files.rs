//! Open Parquet files, one per (kind, hour partition), with rotation and atomic finalize.
//!
//! A file is encoded in memory (row groups close at `row_group_bytes`, the file at
//! `max_file_rows` / `max_file_bytes` / `max_file_age_secs`) and leaves memory only when it is
//! complete, through a [`Destination`] that makes it visible atomically (local disk or an
//! object store). Only then are its rows counted as delivered. If that fails, the encoded file
//! is read back into record batches and handed back to be retried (and spooled while the
//! outage lasts), so an outage delays rows but loses none. Memory per open file is its
//! compressed size, bounded by `max_file_bytes`.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use arrow_array::RecordBatch;
use enum_map::EnumMap;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::WriterProperties;

use super::destination::{Destination, FileError, LocalDirectory};
use super::encodings::COUNTED_WHILE_CONSTANT;
use super::file_buffer::reserve_whole_file;
use super::file_encoder::FileEncoder;
use super::layout::{new_file_key, split_by_hour, HourPartition};
use super::ParquetSinkConfig;
use crate::schema::{schema_for, KIND_KEY, SCHEMA_VERSION, SCHEMA_VERSION_KEY};
use crate::EventKind;

/// A file that finished (delivered), or rows handed back after a failure (to retry).
#[derive(Debug)]
pub enum FileOutcome {
    /// Visible at its final place; `rows` are delivered.
    Finalized {
        /// Kind of the rows.
        kind: EventKind,
        /// Rows in the file.
        rows: u64,
        /// Where it is (a path or an `s3://` URL).
        location: String,
    },
    /// Could not be encoded: a bug, not an outage; `rows` are lost (counted as failed).
    Failed {
        /// Kind of the rows.
        kind: EventKind,
        /// Rows that were in it.
        rows: u64,
        /// Why.
        error: FileError,
    },
    /// Could not be written or completed; `batches` hold every row, to be retried.
    Rejected {
        /// Kind of the rows.
        kind: EventKind,
        /// The rows, oldest first.
        batches: Vec<RecordBatch>,
        /// Why.
        error: FileError,
    },
}

struct OpenFile {
    /// Encodes into memory; the destination sees the file only at finalize.
    writer: FileEncoder,
    /// Its place under the root (`<kind>/dt=../hour=../part-...parquet`).
    key: String,
    rows: u64,
    opened_at: Instant,
}

/// All files currently being written by one Parquet sink.
pub struct PartitionedFiles {
    destination: Box<dyn Destination>,
    host: String,
    config: ParquetSinkConfig,
    properties: EnumMap<EventKind, WriterProperties>,
    open: HashMap<(EventKind, HourPartition), OpenFile>,
}

impl PartitionedFiles {
    /// Files under the local directory `config.path`, named after `host`.
    pub fn new(config: ParquetSinkConfig, host: &str) -> Self {
        let destination = Box::new(LocalDirectory::new(config.path.clone()));
        Self::with_destination(config, host, destination)
    }

    /// Files handed to `destination` once complete.
    pub fn with_destination(
        config: ParquetSinkConfig,
        host: &str,
        destination: Box<dyn Destination>,
    ) -> Self {
        let properties = EnumMap::from_fn(|kind| writer_properties(&config, kind));
        Self {
            destination,
            host: host.to_string(),
            config,
            properties,
            open: HashMap::new(),
        }
    }

    /// Writes `batch` (rows of `kind`), splitting it at hour boundaries of its `time` column.
    /// Files that fill up are finalized and reported in the returned outcomes.
    pub fn write(&mut self, kind: EventKind, batch: &RecordBatch) -> Vec<FileOutcome> {
        let mut outcomes = Vec::new();
        for (partition, slice) in split_by_hour(batch) {
            self.write_slice(kind, partition, &slice, &mut outcomes);
        }
        outcomes
    }

    fn write_slice(
        &mut self,
        kind: EventKind,
        partition: HourPartition,
        slice: &RecordBatch,
        outcomes: &mut Vec<FileOutcome>,
    ) {
        let key = (kind, partition);
        if !self.open.contains_key(&key) {
            self.finalize_earlier_hours(kind, partition, outcomes);
            match self.create(kind, partition) {
                Ok(file) => {
                    self.open.insert(key, file);
                }
                Err(error) => {
                    outcomes.push(FileOutcome::Failed {
                        kind,
                        rows: slice.num_rows() as u64,
                        error,
                    });
                    return;
                }
            }
        }
        let Some(file) = self.open.get_mut(&key) else {
            return;
        };
        let written = file.writer.write(slice).and_then(|()| {
            if file.writer.in_progress_size() >= self.config.row_group_bytes {
                file.writer.flush()?;
                reserve_whole_file(file.writer.inner_mut(), &self.config);
            }
            Ok(())
        });
        file.rows += slice.num_rows() as u64;
        if let Err(source) = written {
            if let Some(file) = self.open.remove(&key) {
                let error = FileError::Parquet {
                    path: PathBuf::from(&file.key),
                    source,
                };
                outcomes.push(FileOutcome::Failed {
                    kind,
                    rows: file.rows,
                    error,
                });
            }
            return;
        }
        let full = file.rows >= self.config.max_file_rows
            || file.writer.bytes_written() + file.writer.in_progress_size()
                >= self.config.max_file_bytes;
        if full {
            if let Some(file) = self.open.remove(&key) {
                outcomes.push(self.finalize(kind, file));
            }
        }
    }

    /// When `kind`'s rows of a later hour arrive, its files of earlier hours are finalized at
    /// once: the previous hour becomes visible in the lake as soon as the next one begins, and in
    /// steady state one file per kind is open (memory does not step up for `max_file_age_secs`
    /// after each hour boundary). Each file still holds one hour; a late row of an earlier hour
    /// opens a file of its own, finalized by age or when a later hour opens again.
    fn finalize_earlier_hours(
        &mut self,
        kind: EventKind,
        partition: HourPartition,
        outcomes: &mut Vec<FileOutcome>,
    ) {
        let mut earlier: Vec<_> = self
            .open
            .keys()
            .filter(|(open_kind, open_partition)| *open_kind == kind && *open_partition < partition)
            .copied()
            .collect();
        earlier.sort_unstable();
        for key in earlier {
            if let Some(file) = self.open.remove(&key) {
                outcomes.push(self.finalize(kind, file));
            }
        }
    }

    /// Finalizes files open longer than `max_file_age`, so data becomes visible even when
    /// events trickle in.
    pub fn rotate_aged(&mut self, now: Instant) -> Vec<FileOutcome> {
        let aged: Vec<_> = self
            .open
            .iter()
            .filter(|((kind, _), file)| {
                now.saturating_duration_since(file.opened_at) >= self.max_age(*kind)
            })
            .map(|(key, _)| *key)
            .collect();
        aged.into_iter()
            .filter_map(|key| {
                let file = self.open.remove(&key)?;
                Some(self.finalize(key.0, file))
            })
            .collect()
    }

    /// How long a file of `kind` stays open at most: XID files about a second, so an XID is
    /// in the lake at once; the others `max_file_age_secs`.
    fn max_age(&self, kind: EventKind) -> Duration {
        match kind {
            EventKind::Xid => Duration::from_millis(self.config.xid_max_file_age_ms),
            EventKind::Cuda | EventKind::Driver | EventKind::CudaStats | EventKind::CudaMemory => {
                Duration::from_secs(self.config.max_file_age_secs)
            }
        }
    }

    /// When the next open file comes of age; None when no file is open.
    pub fn next_rotation(&self) -> Option<Instant> {
        self.open
            .iter()
            .map(|((kind, _), file)| {
                file.opened_at
                    .checked_add(self.max_age(*kind))
                    .unwrap_or(file.opened_at)
            })
            .min()
    }

    /// Finalizes every open file (shutdown).
    pub fn close_all(&mut self) -> Vec<FileOutcome> {
        let mut keys: Vec<_> = self.open.keys().copied().collect();
        keys.sort();
        keys.into_iter()
            .filter_map(|key| {
                let file = self.open.remove(&key)?;
                Some(self.finalize(key.0, file))
            })
            .collect()
    }

    /// Number of files being written.
    pub fn open_files(&self) -> usize {
        self.open.len()
    }

    /// The capacity of each open file's buffer.
    #[cfg(test)]
    pub(super) fn buffer_capacities(&self) -> Vec<usize> {
        self.open
            .values()
            .map(|f| f.writer.inner().capacity())
            .collect()
    }

    fn create(&self, kind: EventKind, partition: HourPartition) -> Result<OpenFile, FileError> {
        let key = new_file_key(kind, partition, &self.host);
        let writer = FileEncoder::try_new(
            schema_for(kind),
            self.properties[kind].clone(),
            &COUNTED_WHILE_CONSTANT,
        )
        .map_err(|source| FileError::Parquet {
            path: PathBuf::from(&key),
            source,
        })?;
        Ok(OpenFile {
            writer,
            key,
            rows: 0,
            opened_at: Instant::now(),
        })
    }

    /// Completes `file` and hands it to the destination.
    fn finalize(&self, kind: EventKind, file: OpenFile) -> FileOutcome {
        let OpenFile {
            mut writer,
            key,
            rows,
            ..
        } = file;
        if let Err(source) = writer.finish() {
            return FileOutcome::Failed {
                kind,
                rows,
                error: FileError::Parquet {
                    path: PathBuf::from(key),
                    source,
                },
            };
        }
        let bytes = bytes::Bytes::from(std::mem::take(writer.inner_mut()));
        drop(writer);
        match self.destination.persist(&key, &bytes) {
            Ok(location) => FileOutcome::Finalized {
                kind,
                rows,
                location,
            },
            Err(error) => match read_back(kind, bytes, &key) {
                Ok(batches) => FileOutcome::Rejected {
                    kind,
                    batches,
                    error,
                },
                Err(read_error) => {
                    tracing::error!(%read_error, "cannot read back an encoded file; its rows are lost");
                    FileOutcome::Failed { kind, rows, error }
                }
            },
        }
    }

    /// Where files go, for logs.
    pub fn destination(&self) -> String {
        self.destination.describe()
    }
}

/// The writer settings of `kind`'s files under `config`: compression, per-column encodings,
/// row groups and the file's metadata.
fn writer_properties(config: &ParquetSinkConfig, kind: EventKind) -> WriterProperties {
    let compression = match config.compression {
        super::ParquetCompression::Zstd => {
            Compression::ZSTD(ZstdLevel::try_new(config.zstd_level).unwrap_or_default())
        }
        super::ParquetCompression::None => Compression::UNCOMPRESSED,
    };
    super::encodings::column_encodings(WriterProperties::builder())
        .set_compression(compression)
        .set_max_row_group_row_count(Some(config.row_group_rows))
        .set_key_value_metadata(Some(vec![
            KeyValue::new(SCHEMA_VERSION_KEY.to_string(), SCHEMA_VERSION.to_string()),
            KeyValue::new(KIND_KEY.to_string(), kind.as_str().to_string()),
        ]))
        .set_created_by(format!("gpuship {}", env!("CARGO_PKG_VERSION")))
        .build()
}

/// An encoder of `kind`'s files as the sink writes them, for rows of `schema` (`kind`'s or
/// some of its columns; public for the column-cost benchmark).
pub fn file_encoder(
    config: &ParquetSinkConfig,
    kind: EventKind,
    schema: arrow_schema::SchemaRef,
) -> Result<FileEncoder, parquet::errors::ParquetError> {
    FileEncoder::try_new(
        schema,
        writer_properties(config, kind),
        &COUNTED_WHILE_CONSTANT,
    )
}

/// The record batches of an encoded file, to retry them after a failed write.
fn read_back(
    kind: EventKind,
    bytes: bytes::Bytes,
    key: &str,
) -> Result<Vec<RecordBatch>, FileError> {
    let parquet_err = |source| FileError::Parquet {
        path: PathBuf::from(key),
        source,
    };
    let reader = ParquetRecordBatchReaderBuilder::try_new(bytes)
        .and_then(|builder| builder.with_batch_size(65_536).build())
        .map_err(parquet_err)?;
    let arrow_err = |e: arrow_schema::ArrowError| {
        parquet_err(parquet::errors::ParquetError::ArrowError(e.to_string()))
    };
    // The schema with its metadata, as the pipeline's batches carry it.
    reader
        .map(|batch| {
            batch
                .and_then(|b| b.with_schema(schema_for(kind)))
                .map_err(arrow_err)
        })
        .collect()
}
