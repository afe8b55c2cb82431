//! Apache Iceberg tables over the compacted files: one table per kind at
//! `<lake>/iceberg/<kind>`, format version 2, partitioned by `hour(time)` (hidden
//! partitioning: engines prune by day and hour from `time` alone), sorted by host and time.
//! `gpuship-lake compact` appends each run's newly committed compaction markers as one
//! snapshot per table; the table's files are the compacted files themselves, where the folder
//! readers read them too, so nothing is stored twice.
//!
//! The catalog is the table's metadata files alone (`metadata/v<N>.metadata.json` and
//! `version-hint.text`): DuckDB's `iceberg_scan`, pyiceberg's `StaticTable`, Spark's and
//! Trino's Hadoop-style catalogs read them as they are; a REST catalog's entry of each table
//! is kept in step after every commit ([`sync`], `--catalog-uri`), and a SQL catalog registers
//! the table from its newest metadata file (docs/operations.md). Written here rather than with
//! iceberg-rust, which links a third arrow version into the lake (issue: one per binary); two
//! readers nobody here wrote check every table in the tests.
//!
//! - [`schema`]: Iceberg schemas from the files' Arrow schemas, ids kept across versions.
//! - [`avro`]: the manifest and manifest list.
//! - [`expire`]: old snapshots and metadata files dropped after a commit.
//! - [`footer`]: a compacted file's facts from its Parquet footer.
//! - [`merge`]: the previous manifests merged into one when a snapshot would list too many.
//! - [`metadata`]: the metadata file and how a snapshot is added.
//! - [`read`]: what a table holds: its metadata, manifests, files and markers.
//! - [`rest`]: a REST catalog's client.
//! - [`sync`]: a REST catalog's entry of each table kept in step with its metadata files.
//! - [`table`]: a table on the lake's storage: load, append, list.

pub mod avro;
pub mod expire;
pub mod footer;
pub mod merge;
pub mod metadata;
pub mod read;
pub mod rest;
pub mod schema;
pub mod sync;
pub mod table;

use anyhow::Context;
use gpuship_model::EventKind;

use crate::compact::marker::{marker_name, Marker};
use crate::compact::phase::Pauser;
use crate::compact::rule::HourFolder;
pub use table::{Appended, Table, ICEBERG_FOLDER};

/// Hours since the Unix epoch of an hour folder (`cuda/dt=2026-11-28/hour=03`).
pub fn hour_of_folder(folder: &str) -> Option<i32> {
    let (start, end) = crate::partition::span_of(folder)?;
    // A day folder without an hour is not one compaction writes into.
    if end - start != chrono::Duration::hours(1) {
        return None;
    }
    i32::try_from(start.timestamp().div_euclid(3_600)).ok()
}

/// Appends to `kind`'s table the compacted files of every marker in `markers` the table does
/// not hold yet. Reads each new compacted file's footer; returns what was added.
pub fn commit_markers(
    table: &Table,
    markers: &[(HourFolder, Marker)],
    pauser: Pauser,
) -> anyhow::Result<Appended> {
    let committed = table.committed_markers()?;
    let mut new = Vec::new();
    for (hour, marker) in markers {
        let key = hour.key(&marker_name(&marker.run));
        if committed.contains(&key) {
            continue;
        }
        let hour_number = hour_of_folder(&hour.folder)
            .with_context(|| format!("{}: not an hour folder", hour.folder))?;
        let mut files = Vec::new();
        for output in &marker.outputs {
            let file = table::read_new_file(table.storage, &hour.key(&output.name), hour_number)?;
            anyhow::ensure!(
                file.rows == output.rows,
                "{}: {} rows, its marker says {}",
                file.key,
                file.rows,
                output.rows
            );
            files.push(file);
        }
        new.push((key, files));
    }
    // Even with nothing new: the append brings a hint left behind by a killed run up to date.
    table.append(&new, pauser, chrono::Utc::now().timestamp_millis())
}

/// The folder of `kind`'s table, relative to the lake.
pub fn table_folder(kind: EventKind) -> String {
    table::table_key(kind)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hour_folders_number_hours_since_the_epoch() {
        assert_eq!(hour_of_folder("cuda/dt=1970-01-01/hour=00"), Some(0));
        assert_eq!(hour_of_folder("cuda/dt=2026-11-28/hour=03"), Some(498_843));
        assert_eq!(hour_of_folder("cuda/dt=1969-12-31/hour=23"), Some(-1));
        assert_eq!(hour_of_folder("cuda/dt=2026-11-28"), None);
        assert_eq!(hour_of_folder("cuda/dt=2026-11-28/hour=24"), None);
    }
}
