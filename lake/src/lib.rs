//! gpuship-lake: reads the data lake the Parquet sink writes (`<root>/<kind>/dt=YYYY-MM-DD/
//! hour=HH/part-<host>-<uuid>.parquet`, plus `<root>/_accounting/*.json`) for a time range, and
//! the views people read it through (`gpuship report`, `gpuship export-trace`). Nothing but
//! [`compact`] writes to the lake, and nothing here needs BPF or root: a user who only reads
//! the lake links this crate (or runs its `gpuship-lake` binary) without the agent.
//!
//! - [`storage`]: the [`LakeStorage`] trait, the only code that touches where the lake is kept;
//!   [`local`] implements it for a folder, [`remote`] for S3.
//! - [`range`]: `--since`/`--until` and the [`TimeRange`] they make.
//! - [`partition`]: pruning by the `dt=`/`hour=` folders before any file is fetched.
//! - [`inventory`]: the files of a table for a range, each checked before the engine opens it.
//! - [`engine`]: DataFusion over those files: one table per event kind ([`lake_table`]: the
//!   listed files and nothing else, a few hundred bytes each while planned), partitions
//!   pruned, the range and the columns pushed down to the Parquet scan, files scanned in
//!   parallel, through a read-only [`listed_store`]; [`whole_file`] fetches each small file in
//!   one request. [`read`] is one read: tables, queries folded as they stream, and the files
//!   left out.
//! - [`table`]: one Parquet object decoded alone, to tell which file a failed query tripped on.
//! - [`accounting`]: the delivery counters kept beside the data.
//! - [`catalog`]: the XID catalog (names, severities, actions), the `gpuship-catalog` crate
//!   shared with the agent, which writes it into every XID row; the views fill older rows from
//!   it.
//! - [`views`]: the report and the trace export; [`args`]: their command-line arguments.
//! - [`compact`]: `gpuship-lake compact`, the one part that writes: it rewrites closed hours
//!   into large files and commits them with a marker; [`compact::rule`] is how every reader
//!   above sees each row once meanwhile.
//! - [`iceberg`]: the Apache Iceberg table of each kind over the compacted files, appended by
//!   `compact` and read by the views with `--iceberg`.
//!
//! A file that cannot be read is reported with its key and skipped; it does not fail the read.
//! Neither does a folder that cannot be listed. Only regular files are opened: a FIFO or device
//! named like a data file is refused without opening it, so reading never waits on one.

pub mod accounting;
pub mod args;
mod bounded_udf;
pub mod compact;
/// The XID catalog, from its own crate (the agent uses it too).
pub use gpuship_catalog as catalog;
pub mod engine;
pub mod iceberg;
pub mod inventory;
pub mod lake_table;
pub mod limits;
pub mod listed_store;
pub mod local;
pub mod partition;
pub mod range;
pub mod read;
pub mod remote;
pub mod storage;
pub mod table;
pub mod views;
pub mod whole_file;

use std::path::Path;

use anyhow::Context;
use arrow_array::RecordBatch;
use gpuship_model::EventKind;

pub use accounting::{AccountingTotals, KmsgTotals, RingTotals, SinkTotals};
pub use engine::QueryError;
use gpuship_model::s3::S3Url;
pub use local::LocalStorage;
pub use range::{RangeError, TimeRange};
pub use read::LakeRead;
pub use remote::ObjectStoreStorage;
pub use storage::{LakeStorage, Listing, StorageError, Unreadable};

/// The storage of the lake at `location`: a local folder or `s3://bucket/prefix` (client
/// settings from the AWS environment).
pub fn open_storage(location: &str) -> anyhow::Result<Box<dyn LakeStorage>> {
    if let Some(url) = S3Url::parse(location) {
        let url = url.map_err(|err| anyhow::anyhow!(err))?;
        return Ok(Box::new(ObjectStoreStorage::open(url)?));
    }
    if let Some((scheme, _)) = location.split_once("://") {
        anyhow::bail!("{location}: {scheme}:// lakes are not supported; use a folder or s3://");
    }
    let storage = LocalStorage::open(Path::new(location)).with_context(|| {
        format!("no data lake at {location} (the Parquet sink's `path`; pass it with --data)")
    })?;
    Ok(Box::new(storage))
}

/// The rows of one table for a range, and what it took to get them.
#[derive(Debug, Default)]
pub struct TableRead {
    /// Rows inside the range.
    pub batches: Vec<RecordBatch>,
    /// Files opened and read.
    pub files_read: usize,
    /// Files whose partitions lie outside the range (never fetched).
    pub files_pruned: usize,
    /// Hidden or in-progress files (names starting with `.`) and non-Parquet files, left alone.
    pub files_ignored: usize,
    /// Files that could not be read; their rows are missing from `batches`.
    pub unreadable: Vec<Unreadable>,
}

impl TableRead {
    /// Number of rows read.
    pub fn rows(&self) -> usize {
        table::row_count(&self.batches)
    }
}

/// A lake, opened for reading.
pub struct Lake {
    storage: Box<dyn LakeStorage>,
    limits: limits::Limits,
    /// Tables from the Iceberg tables' current snapshots instead of the folders.
    from_iceberg: bool,
}

impl std::fmt::Debug for Lake {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lake")
            .field("location", &self.storage.describe())
            .finish()
    }
}

impl Lake {
    /// Opens the lake at `location`: the Parquet sink's `path`, a local folder or
    /// `s3://bucket/prefix` (client settings from the AWS environment).
    pub fn open(location: &str) -> anyhow::Result<Lake> {
        Ok(Self::with_storage(open_storage(location)?))
    }

    /// A lake kept in `storage`.
    pub fn with_storage(storage: Box<dyn LakeStorage>) -> Lake {
        Lake {
            storage,
            limits: limits::Limits::default(),
            from_iceberg: false,
        }
    }

    /// The same lake, its tables read from the Iceberg tables (`<lake>/iceberg/<kind>`, their
    /// current snapshots: compacted hours only, no folder listed) instead of the folders.
    pub fn from_iceberg(self, from_iceberg: bool) -> Lake {
        Lake {
            from_iceberg,
            ..self
        }
    }

    /// The same lake, read within `limits` (memory and time, [`limits`]).
    pub fn with_limits(self, limits: limits::Limits) -> Lake {
        Lake { limits, ..self }
    }

    /// Where the lake is, for people.
    pub fn location(&self) -> String {
        self.storage.describe()
    }

    /// The tables `kinds` for `range`, ready for queries ([`LakeRead::query`]). Files that
    /// cannot be read are logged (with their key), skipped and listed by
    /// [`LakeRead::unreadable`].
    pub fn tables(&self, kinds: &[EventKind], range: &TimeRange) -> anyhow::Result<LakeRead<'_>> {
        LakeRead::new(
            self.storage.as_ref(),
            kinds,
            *range,
            self.limits,
            (self.from_iceberg, false),
        )
    }

    /// [`tables`](Self::tables), `cuda_stats` read from its hourly roll-up in the compacted
    /// hours the range covers whole (one row per process, function and result per hour:
    /// [`compact::rollup`]). For readers that only add its rows up; the Iceberg tables have no
    /// roll-up, so with [`from_iceberg`](Self::from_iceberg) this is `tables`.
    pub fn tables_rolled_up(
        &self,
        kinds: &[EventKind],
        range: &TimeRange,
    ) -> anyhow::Result<LakeRead<'_>> {
        LakeRead::new(
            self.storage.as_ref(),
            kinds,
            *range,
            self.limits,
            (self.from_iceberg, true),
        )
    }

    /// The rows of `kind` inside `range`. Files that cannot be read are logged (with their
    /// key) and skipped; [`read_table`](Self::read_table) also returns them.
    pub fn read(&self, kind: EventKind, range: &TimeRange) -> anyhow::Result<Vec<RecordBatch>> {
        Ok(self.read_table(kind, range)?.batches)
    }

    /// Every row of `kind` inside `range`, with what was read, pruned, ignored and skipped.
    pub fn read_table(&self, kind: EventKind, range: &TimeRange) -> anyhow::Result<TableRead> {
        let mut read = self.tables(&[kind], range)?;
        let batches = read
            .rows(kind)
            .with_context(|| format!("reading {kind} in {}", self.location()))?;
        let inventory = read.inventory(kind).cloned().unwrap_or_default();
        let read = TableRead {
            batches,
            files_read: inventory.files.len(),
            files_pruned: inventory.pruned,
            files_ignored: inventory.ignored,
            unreadable: inventory.unreadable,
        };
        if !read.unreadable.is_empty() {
            tracing::warn!(
                table = %kind,
                skipped = read.unreadable.len(),
                read = read.files_read,
                "some files could not be read; their rows are missing"
            );
        }
        Ok(read)
    }

    /// The delivery counters of the accounting documents whose window overlaps `range` (every
    /// document without a window), summed.
    pub fn accounting(&self, range: &TimeRange) -> anyhow::Result<AccountingTotals> {
        let mut totals = AccountingTotals::default();
        let listing = self
            .storage
            .list(accounting::ACCOUNTING_PREFIX)
            .with_context(|| format!("listing _accounting/ in {}", self.location()))?;
        totals.unreadable.extend(listing.unreadable);
        for key in listing.keys {
            let name = key.rsplit('/').next().unwrap_or(&key);
            if name.starts_with('.') || !name.ends_with(".json") {
                continue;
            }
            match self.storage.get(&key) {
                Ok(text) => totals.add_document(&key, &text, range),
                Err(err) => totals.unreadable.push(Unreadable {
                    key,
                    error: err.to_string(),
                }),
            }
        }
        for skipped in &totals.unreadable {
            tracing::warn!(file = %skipped.key, error = %skipped.error, "skipping an accounting document");
        }
        Ok(totals)
    }
}

#[cfg(test)]
mod fuzz_tests;
#[cfg(test)]
mod tests;
