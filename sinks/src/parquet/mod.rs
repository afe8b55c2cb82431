//! The Parquet sink: hive-partitioned, zstd-compressed files that DuckDB, Spark or any lake
//! engine reads directly (`read_parquet('<root>/xid/**/*.parquet', hive_partitioning=true)`).
//!
//! Encoding and file I/O are blocking work, so the sink runs on a blocking thread of the tokio
//! runtime and never stalls the async sinks beside it.

mod destination;
mod encodings;
mod file_buffer;
mod file_encoder;
mod files;
mod layout;
mod remote;
mod sink_type;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde::Deserialize;
use tokio::runtime::Handle;

pub use destination::{Destination, FileError, LocalDirectory, Unavailable};
pub use file_encoder::FileEncoder;
pub use files::{file_encoder, FileOutcome, PartitionedFiles};
pub use layout::{HourPartition, TEMP_SUFFIX};
pub use remote::{ObjectStoreDestination, ObjectStoreOptions, RemoteError, S3Url};

use crate::limits::out_of_range;
use crate::sink::{run_blocking, Sink, SinkInput, SinkRun};
use crate::EventBatch;

/// Column compression.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum ParquetCompression {
    /// zstd at `zstd_level` (default).
    #[default]
    Zstd,
    /// No compression.
    None,
}

/// `[[sinks]] type = "parquet"`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ParquetSinkConfig {
    /// Root: a local directory, or `s3://bucket/prefix` on an S3-compatible object store;
    /// tables go to `<path>/<kind>/dt=.../hour=.../`.
    pub path: PathBuf,
    /// Settings of an `s3://` root (endpoint, region, retries); credentials come from the
    /// standard AWS chain.
    #[serde(default)]
    pub object_store: Option<ObjectStoreOptions>,
    /// Column compression.
    #[serde(default)]
    pub compression: ParquetCompression,
    /// zstd level (1..=22).
    #[serde(default = "defaults::zstd_level")]
    pub zstd_level: i32,
    /// Rows per row group at most.
    #[serde(default = "defaults::row_group_rows")]
    pub row_group_rows: usize,
    /// A row group is closed once its buffered (encoded) size reaches this.
    #[serde(default = "defaults::row_group_bytes")]
    pub row_group_bytes: usize,
    /// A file is finalized after this many rows.
    #[serde(default = "defaults::max_file_rows")]
    pub max_file_rows: u64,
    /// A file is finalized once it reaches about this many bytes; files are encoded in memory,
    /// so this also bounds the memory of each open file.
    #[serde(default = "defaults::max_file_bytes")]
    pub max_file_bytes: usize,
    /// A file is finalized this many seconds after it was opened, so data shows up steadily.
    #[serde(default = "defaults::max_file_age_secs")]
    pub max_file_age_secs: u64,
    /// XID files are finalized this many milliseconds after they were opened, so an XID is in
    /// the lake within about a second (XIDs are rare: small files are the price).
    #[serde(default = "defaults::xid_max_file_age_ms")]
    pub xid_max_file_age_ms: u64,
}

mod defaults {
    pub fn zstd_level() -> i32 {
        1
    }
    pub fn row_group_rows() -> usize {
        128 * 1024
    }
    pub fn row_group_bytes() -> usize {
        1024 * 1024
    }
    pub fn max_file_rows() -> u64 {
        5_000_000
    }
    pub fn max_file_bytes() -> usize {
        4 * 1024 * 1024
    }
    pub fn max_file_age_secs() -> u64 {
        300
    }
    pub fn xid_max_file_age_ms() -> u64 {
        1_000
    }
}

/// The range `xid_max_file_age_ms` must be in.
pub const XID_MAX_FILE_AGE_MS_RANGE: std::ops::RangeInclusive<u64> = 10..=60_000;

impl ParquetSinkConfig {
    /// The object-store root, when `path` is an `s3://` URL (an error when it is a malformed
    /// one); `None` for a local directory.
    pub fn s3_url(&self) -> Option<Result<S3Url, String>> {
        S3Url::parse(self.path.to_str()?)
    }

    /// Where this sink's files go: a local directory, or the object store of an `s3://`
    /// root, uploading through `handle` (callers of `persist` are blocking threads).
    pub fn destination(&self, handle: &Handle) -> Result<Box<dyn Destination>, Unavailable> {
        let url = match self.s3_url() {
            None => return Ok(Box::new(LocalDirectory::new(self.path.clone()))),
            Some(Ok(url)) => url,
            Some(Err(reason)) => {
                return Err(Unavailable {
                    destination: self.path.display().to_string(),
                    reason,
                })
            }
        };
        let options = self.object_store.clone().unwrap_or_default();
        match options.build(&url) {
            Ok(store) => Ok(Box::new(ObjectStoreDestination::new(
                store,
                url,
                handle.clone(),
            ))),
            Err(err) => Err(Unavailable {
                destination: url.to_string(),
                reason: err.to_string(),
            }),
        }
    }

    /// A config with every default and the given root.
    pub fn with_path(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            object_store: None,
            compression: ParquetCompression::default(),
            zstd_level: defaults::zstd_level(),
            row_group_rows: defaults::row_group_rows(),
            row_group_bytes: defaults::row_group_bytes(),
            max_file_rows: defaults::max_file_rows(),
            max_file_bytes: defaults::max_file_bytes(),
            max_file_age_secs: defaults::max_file_age_secs(),
            xid_max_file_age_ms: defaults::xid_max_file_age_ms(),
        }
    }

    /// Every problem with the values, as `(key, message)` pairs; empty when valid.
    pub fn problems(&self) -> Vec<(&'static str, String)> {
        let mut problems = Vec::new();
        if self.path.as_os_str().is_empty() {
            problems.push(("path", "must not be empty".to_string()));
        }
        match self.s3_url() {
            Some(Err(message)) => problems.push(("path", message)),
            Some(Ok(url)) => {
                let options = self.object_store.clone().unwrap_or_default();
                let option_problems = options.problems();
                if option_problems.is_empty() {
                    if let Err(err) = options.build(&url) {
                        problems.push(("object_store", err.to_string()));
                    }
                }
                problems.extend(option_problems);
            }
            None if self.object_store.is_some() => {
                problems.push(("object_store", "only applies to an s3:// path".to_string()))
            }
            None => {}
        }
        if let Some(message) = out_of_range(self.zstd_level, 1..=22) {
            problems.push(("zstd_level", message));
        }
        // Files are encoded in memory: max_file_bytes bounds each open file's memory.
        for (key, value, range) in [
            ("row_group_rows", self.row_group_rows as u64, 1..=16_777_216),
            ("row_group_bytes", self.row_group_bytes as u64, 1..=1 << 30),
            ("max_file_rows", self.max_file_rows, 1..=1_000_000_000),
            ("max_file_bytes", self.max_file_bytes as u64, 1..=4 << 30),
            ("max_file_age_secs", self.max_file_age_secs, 1..=86_400),
            (
                "xid_max_file_age_ms",
                self.xid_max_file_age_ms,
                XID_MAX_FILE_AGE_MS_RANGE,
            ),
        ] {
            if let Some(message) = out_of_range(value, range) {
                problems.push((key, message));
            }
        }
        problems
    }
}

/// The running Parquet sink.
pub struct ParquetSink {
    name: String,
    host: String,
    config: ParquetSinkConfig,
}

impl ParquetSink {
    /// Builds the sink; `host` goes into file names.
    pub fn new(
        name: impl Into<String>,
        config: ParquetSinkConfig,
        host: impl Into<String>,
    ) -> Self {
        Self {
            name: name.into(),
            host: host.into(),
            config,
        }
    }
}

impl Sink for ParquetSink {
    fn name(&self) -> &str {
        &self.name
    }

    fn run(self: Box<Self>, input: SinkInput) -> SinkRun {
        Box::pin(async move {
            let name = self.name.clone();
            if self.config.s3_url().is_none() {
                // A destination that is not there yet is an outage like any other: batches
                // are retried and spooled, and the sink keeps running.
                if let Err(err) = std::fs::create_dir_all(&self.config.path) {
                    tracing::warn!(sink = %name, path = %self.config.path.display(), %err, "parquet root not available yet");
                }
            }
            run_blocking(name, move |handle| self.run_blocking(handle, input)).await
        })
    }
}

impl ParquetSink {
    /// Local directory or object store, as `path` says. Validation has already built the
    /// object-store client once, so a failure here is unexpected; it is logged and the rows
    /// then fail like any other write (retried, spooled), rather than being dropped.
    fn destination(&self, handle: &Handle) -> Box<dyn Destination> {
        match self.config.destination(handle) {
            Ok(destination) => destination,
            Err(unavailable) => {
                tracing::error!(sink = %self.name, url = %unavailable.destination, err = %unavailable.reason, "cannot build the object-store client");
                Box::new(unavailable)
            }
        }
    }

    fn run_blocking(self, handle: Handle, mut input: SinkInput) {
        let destination = self.destination(&handle);
        tracing::info!(sink = %self.name, destination = %destination.describe(), "parquet sink writing");
        let mut files =
            PartitionedFiles::with_destination(self.config.clone(), &self.host, destination);
        // XID rows wait in their file until it closes; only past that is their
        // acknowledgement overdue. CUDA rows waiting for max_file_age_secs are never overdue:
        // the queue sees this sink stall only when it stops taking (a write, fsync or rename
        // that does not return).
        input
            .batches
            .holds_xids_for(Duration::from_millis(self.config.xid_max_file_age_ms));
        // Age rotation is checked when the oldest open file comes of age, and at least this
        // often, even when no batch arrives.
        let tick = Duration::from_secs(self.config.max_file_age_secs.clamp(1, 5));
        loop {
            let wait = files
                .next_rotation()
                .map_or(tick, |at| at.saturating_duration_since(Instant::now()))
                .clamp(Duration::from_millis(5), tick);
            let next = handle.block_on(tokio::time::timeout(wait, input.batches.recv()));
            match next {
                Ok(Some(batch)) => {
                    let outcomes = files.write(batch.kind, &batch.records);
                    self.account(&input, outcomes);
                }
                Ok(None) => {
                    // The queue is closed and empty: finish the open files. Rows of a file that
                    // cannot be written go back to the queue, which retries them until its
                    // shutdown deadline and then spools them; only then are we done.
                    let outcomes = files.close_all();
                    let rejected = outcomes
                        .iter()
                        .any(|o| matches!(o, FileOutcome::Rejected { .. }));
                    self.account(&input, outcomes);
                    if !rejected {
                        break;
                    }
                    continue;
                }
                Err(_elapsed) => {}
            }
            self.account(&input, files.rotate_aged(Instant::now()));
        }
        tracing::info!(sink = %self.name, "parquet sink closed all files");
    }

    /// Counts finalized files as delivered; hands rows of failed files back to the queue,
    /// which retries them (and spools what does not fit while the disk fails).
    fn account(&self, input: &SinkInput, outcomes: Vec<FileOutcome>) {
        for outcome in outcomes {
            match outcome {
                FileOutcome::Finalized {
                    kind,
                    rows,
                    location,
                } => {
                    input.stats.delivered.add(kind, rows);
                    input.batches.delivered();
                    tracing::debug!(sink = %self.name, %kind, rows, %location, "parquet file finalized");
                }
                FileOutcome::Failed { kind, rows, error } => {
                    input.stats.failed.add(kind, rows);
                    tracing::error!(sink = %self.name, %kind, rows, %error, "parquet encoding failed; rows lost");
                }
                FileOutcome::Rejected {
                    kind,
                    batches,
                    error,
                } => {
                    let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
                    tracing::error!(sink = %self.name, %kind, rows, %error, "parquet write failed; rows will be retried");
                    // Front-inserted one by one: newest first keeps the original order.
                    for batch in batches.into_iter().rev() {
                        input.batches.reject(EventBatch::new(kind, batch));
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod encoding_tests;
#[cfg(test)]
mod tests;
