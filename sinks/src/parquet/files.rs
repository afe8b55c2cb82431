//! Open Parquet files, one per (kind, hour partition), with rotation and atomic finalize.
//!
//! A file is encoded in memory (row groups close at `row_group_bytes`, the file at
//! `max_file_rows` / `max_file_bytes` / `max_file_age_secs`) and touches the disk only when it
//! is complete: written under a hidden temporary name, fsynced, renamed to its final name, and
//! its directory fsynced. Only then are its rows counted as delivered. If any of that fails,
//! the encoded file is read back into record batches and handed back to be retried (and
//! spooled while the disk fails), so a disk outage delays rows but loses none. Memory per open
//! file is its compressed size, bounded by `max_file_bytes`.

use std::collections::HashMap;
use std::fs::{self, File};
use std::io;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use arrow_array::cast::AsArray;
use arrow_array::types::TimestampMicrosecondType;
use arrow_array::RecordBatch;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::WriterProperties;

use super::layout::{new_file_paths, HourPartition};
use super::ParquetSinkConfig;
use crate::schema::{schema_for, KIND_KEY, SCHEMA_VERSION, SCHEMA_VERSION_KEY};
use crate::EventKind;

/// Failures writing one file; the file's rows are lost and counted as failed.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// Filesystem error with the path involved.
    #[error("{action} {path}: {source}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// Encoding error from the Parquet writer.
    #[error("writing {path}: {source}")]
    Parquet {
        /// The file.
        path: PathBuf,
        /// The writer's error.
        source: parquet::errors::ParquetError,
    },
}

/// A file that finished (delivered), or rows handed back after a failure (to retry).
#[derive(Debug)]
pub enum FileOutcome {
    /// Renamed into place; `rows` are delivered.
    Finalized {
        /// Kind of the rows.
        kind: EventKind,
        /// Rows in the file.
        rows: u64,
        /// Where it is.
        path: PathBuf,
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
    /// Encodes into memory; the disk is touched only at finalize.
    writer: ArrowWriter<Vec<u8>>,
    temp_path: PathBuf,
    final_path: PathBuf,
    rows: u64,
    opened_at: Instant,
}

/// All files currently being written by one Parquet sink.
pub struct PartitionedFiles {
    root: PathBuf,
    host: String,
    config: ParquetSinkConfig,
    properties: HashMap<EventKind, WriterProperties>,
    open: HashMap<(EventKind, HourPartition), OpenFile>,
}

impl PartitionedFiles {
    /// Files under `config.path`, named after `host`.
    pub fn new(config: ParquetSinkConfig, host: &str) -> Self {
        let properties = EventKind::ALL
            .iter()
            .map(|&kind| (kind, writer_properties(&config, kind)))
            .collect();
        Self {
            root: config.path.clone(),
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
                file.writer.flush()
            } else {
                Ok(())
            }
        });
        file.rows += slice.num_rows() as u64;
        if let Err(source) = written {
            if let Some(file) = self.open.remove(&key) {
                let error = FileError::Parquet {
                    path: file.final_path.clone(),
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
                outcomes.push(finalize(kind, file));
            }
        }
    }

    /// Finalizes files open longer than `max_file_age`, so data becomes visible even when
    /// events trickle in.
    pub fn rotate_aged(&mut self, now: Instant) -> Vec<FileOutcome> {
        let max_age = Duration::from_secs(self.config.max_file_age_secs);
        let aged: Vec<_> = self
            .open
            .iter()
            .filter(|(_, file)| now.duration_since(file.opened_at) >= max_age)
            .map(|(key, _)| *key)
            .collect();
        aged.into_iter()
            .filter_map(|key| self.open.remove(&key).map(|file| finalize(key.0, file)))
            .collect()
    }

    /// Finalizes every open file (shutdown).
    pub fn close_all(&mut self) -> Vec<FileOutcome> {
        let mut keys: Vec<_> = self.open.keys().copied().collect();
        keys.sort();
        keys.into_iter()
            .filter_map(|key| self.open.remove(&key).map(|file| finalize(key.0, file)))
            .collect()
    }

    /// Number of files being written.
    pub fn open_files(&self) -> usize {
        self.open.len()
    }

    fn create(&self, kind: EventKind, partition: HourPartition) -> Result<OpenFile, FileError> {
        let paths = new_file_paths(&self.root, kind, partition, &self.host);
        let properties = self.properties.get(&kind).cloned();
        let writer =
            ArrowWriter::try_new(Vec::new(), schema_for(kind), properties).map_err(|source| {
                FileError::Parquet {
                    path: paths.final_path.clone(),
                    source,
                }
            })?;
        Ok(OpenFile {
            writer,
            temp_path: paths.temp_path,
            final_path: paths.final_path,
            rows: 0,
            opened_at: Instant::now(),
        })
    }
}

fn writer_properties(config: &ParquetSinkConfig, kind: EventKind) -> WriterProperties {
    let compression = match config.compression {
        super::ParquetCompression::Zstd => {
            Compression::ZSTD(ZstdLevel::try_new(config.zstd_level).unwrap_or_default())
        }
        super::ParquetCompression::None => Compression::UNCOMPRESSED,
    };
    WriterProperties::builder()
        .set_compression(compression)
        .set_max_row_group_row_count(Some(config.row_group_rows))
        .set_key_value_metadata(Some(vec![
            KeyValue::new(SCHEMA_VERSION_KEY.to_string(), SCHEMA_VERSION.to_string()),
            KeyValue::new(KIND_KEY.to_string(), kind.as_str().to_string()),
        ]))
        .set_created_by(format!("gpuship {}", env!("CARGO_PKG_VERSION")))
        .build()
}

fn finalize(kind: EventKind, file: OpenFile) -> FileOutcome {
    let OpenFile {
        mut writer,
        temp_path,
        final_path,
        rows,
        ..
    } = file;
    if let Err(source) = writer.finish() {
        return FileOutcome::Failed {
            kind,
            rows,
            error: FileError::Parquet {
                path: final_path,
                source,
            },
        };
    }
    let bytes = std::mem::take(writer.inner_mut());
    drop(writer);
    match persist(&bytes, &temp_path, &final_path) {
        Ok(()) => FileOutcome::Finalized {
            kind,
            rows,
            path: final_path,
        },
        Err(error) => {
            let _ = fs::remove_file(&temp_path);
            match read_back(kind, bytes, &final_path) {
                Ok(batches) => FileOutcome::Rejected {
                    kind,
                    batches,
                    error,
                },
                Err(read_error) => {
                    tracing::error!(%read_error, "cannot read back an encoded file; its rows are lost");
                    FileOutcome::Failed { kind, rows, error }
                }
            }
        }
    }
}

/// Writes a complete file: temporary name, fsync, rename, directory fsync.
fn persist(bytes: &[u8], temp: &Path, final_path: &Path) -> Result<(), FileError> {
    let io_err = |action, path: &Path| {
        let path = path.to_path_buf();
        move |source| FileError::Io {
            action,
            path,
            source,
        }
    };
    let dir = final_path.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(dir).map_err(io_err("creating directory", dir))?;
    // Readable by the owner's group (the analysts), not by everyone.
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o640)
        .open(temp)
        .map_err(io_err("creating", temp))?;
    file.write_all(bytes).map_err(io_err("writing", temp))?;
    file.sync_all().map_err(io_err("fsync", temp))?;
    drop(file);
    fs::rename(temp, final_path).map_err(io_err("renaming into place", final_path))?;
    // The file is in place and complete; a failed directory fsync only weakens durability
    // across a power loss, so it is reported rather than undone.
    if let Err(err) = File::open(dir).and_then(|d| d.sync_all()) {
        tracing::warn!(dir = %dir.display(), %err, "fsync of the directory failed");
    }
    Ok(())
}

/// The record batches of an encoded file, to retry them after a failed write.
fn read_back(kind: EventKind, bytes: Vec<u8>, path: &Path) -> Result<Vec<RecordBatch>, FileError> {
    let parquet_err = |source| FileError::Parquet {
        path: path.to_path_buf(),
        source,
    };
    let reader = ParquetRecordBatchReaderBuilder::try_new(bytes::Bytes::from(bytes))
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

/// Contiguous runs of rows in the same hour, as zero-copy slices.
fn split_by_hour(batch: &RecordBatch) -> Vec<(HourPartition, RecordBatch)> {
    let Some(times) = batch
        .column_by_name("time")
        .and_then(|c| c.as_primitive_opt::<TimestampMicrosecondType>())
    else {
        return vec![(HourPartition::of_micros(0), batch.clone())];
    };
    let mut runs = Vec::new();
    let mut start = 0;
    while start < times.len() {
        let partition = HourPartition::of_micros(times.value(start));
        let mut end = start + 1;
        while end < times.len() && HourPartition::of_micros(times.value(end)) == partition {
            end += 1;
        }
        runs.push((partition, batch.slice(start, end - start)));
        start = end;
    }
    runs
}
