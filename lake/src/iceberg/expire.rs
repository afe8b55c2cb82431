//! Snapshot expiry and the metadata folder's clean-up, run after each commit. Every run adds a
//! snapshot, and every metadata file repeats all of them: kept forever, a table committed
//! hourly would hold 8,760 metadata files a year, the last ones megabytes each. A commit keeps
//! the newest `--keep-snapshots` snapshots (default [`KEEP_SNAPSHOTS`]: five days of hourly
//! runs) and as many earlier metadata files in its `metadata-log`; after the commit, the
//! metadata files older than those, the manifest lists of expired snapshots, and every
//! manifest no kept snapshot lists are deleted, as are the unnamed Avro files of a run killed
//! before its commit once they are an hour old ([`ORPHAN_MIN_AGE`]). Data files are never deleted: compaction only appends, so every file an
//! expired snapshot listed is still listed by the current one.
//!
//! Which markers a table holds must outlive the snapshots that added them (a rerun must not
//! add a marker twice): they are also read from the current snapshot's data files, whose keys
//! name the run that wrote them ([`marker_of_file`]).

use std::collections::BTreeSet;

use anyhow::Context;

use crate::compact::marker::{marker_name, OUTPUT_PREFIX};

use super::metadata::{Snapshot, TableMetadata};
use super::read::{file_name, manifests_of};
use super::table::{metadata_key, table_key, Table};

/// How old an Avro file of the metadata folder that nothing reads must be before a run
/// deletes it: one written minutes ago may belong to another run that has not committed yet
/// (the scheduler runs one at a time on S3, where no lock enforces it).
pub const ORPHAN_MIN_AGE: chrono::TimeDelta = chrono::TimeDelta::hours(1);

/// Snapshots a table keeps by default: five days of an hourly timer's runs (Iceberg's own
/// default keeps five days).
pub const KEEP_SNAPSHOTS: usize = 120;

/// The marker of a compacted file's key (`cuda/dt=.../hour=03/compact-<run>-0000.parquet` ->
/// `cuda/dt=.../hour=03/_compaction-<run>.json`); `None` for a key that is not one.
pub fn marker_of_file(key: &str) -> Option<String> {
    let (folder, name) = key.rsplit_once('/')?;
    let stem = name.strip_prefix(OUTPUT_PREFIX)?.strip_suffix(".parquet")?;
    let (run, index) = stem.rsplit_once('-')?;
    if run.is_empty() || index.is_empty() || !index.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(format!("{folder}/{}", marker_name(run)))
}

/// Drops all but the newest `keep` snapshots (at least the current one) from `metadata`, with
/// their `snapshot-log` entries, and all but the newest `keep` entries of its `metadata-log`;
/// returns the snapshots dropped.
pub fn expire(metadata: &mut TableMetadata, keep: usize) -> Vec<Snapshot> {
    let keep = keep.max(1);
    let expired_count = metadata.snapshots.len().saturating_sub(keep);
    let expired: Vec<Snapshot> = metadata.snapshots.drain(..expired_count).collect();
    let kept: BTreeSet<i64> = metadata.snapshots.iter().map(|s| s.snapshot_id).collect();
    metadata
        .snapshot_log
        .retain(|entry| kept.contains(&entry.snapshot_id));
    let log_excess = metadata.metadata_log.len().saturating_sub(keep);
    metadata.metadata_log.drain(..log_excess);
    expired
}

/// Whether a file of the metadata folder (its name) may be deleted after a commit of version
/// `current` that keeps `keep` snapshots: a metadata file older than the `keep` before
/// `current`, or an Avro file (manifest or manifest list) that is not in `referenced`. The
/// hint and files of other names are kept.
pub fn is_unreferenced(
    name: &str,
    (current, keep): (u64, usize),
    referenced: &BTreeSet<String>,
) -> bool {
    if let Some(version) = super::table::version_of(name) {
        return version.saturating_add(keep.max(1) as u64) < current;
    }
    name.ends_with(".avro") && !referenced.contains(name)
}

/// After the commit of `version`, which dropped the snapshots `expired`: deletes the
/// metadata files older than the ones its log keeps, the Avro files that only expired
/// snapshots read (their manifest lists and the manifests no kept snapshot lists), and Avro
/// files nothing reads that are older than [`ORPHAN_MIN_AGE`] (a killed run's
/// unnamed files; a younger one may be another run's, not committed yet). A failure is
/// logged: the commit stands, and the next run deletes what is left.
pub fn clean_metadata_folder(
    table: &Table<'_>,
    version: u64,
    metadata: &TableMetadata,
    expired: &[Snapshot],
) {
    let cleaned = || -> anyhow::Result<usize> {
        let read_by = |snapshots: &[Snapshot], lenient: bool| {
            let mut names = BTreeSet::new();
            for snapshot in snapshots {
                names.insert(file_name(&snapshot.manifest_list).to_string());
                match manifests_of(table.storage, snapshot) {
                    Ok(manifests) => {
                        names.extend(manifests.iter().map(|m| file_name(&m.path).to_string()))
                    }
                    // An expired snapshot's list may be gone already (a run killed
                    // while cleaning up): its files are then orphans.
                    Err(_) if lenient => {}
                    Err(err) => return Err(err),
                }
            }
            Ok(names)
        };
        let referenced = read_by(&metadata.snapshots, false)?;
        let expired_read = read_by(expired, true)?;
        let prefix = metadata_key(table.kind, "");
        let listing = table.storage.list(&prefix)?;
        let now = chrono::Utc::now();
        let mut deleted = 0;
        for key in &listing.keys {
            let name = file_name(key);
            if !is_unreferenced(name, (version, table.keep_snapshots), &referenced) {
                continue;
            }
            let orphan = name.ends_with(".avro") && !expired_read.contains(name);
            if orphan {
                let age = table
                    .storage
                    .stat(key)
                    .map(|meta| now.signed_duration_since(meta.last_modified))
                    .with_context(|| format!("reading the age of {key}"))?;
                if age < ORPHAN_MIN_AGE {
                    continue;
                }
            }
            table
                .delete(key)
                .with_context(|| format!("deleting {key}"))?;
            deleted += 1;
        }
        Ok(deleted)
    };
    match cleaned() {
        Ok(0) => {}
        Ok(deleted) => {
            tracing::info!(table = %table_key(table.kind), deleted, "iceberg metadata files no kept snapshot reads deleted")
        }
        Err(err) => {
            tracing::warn!(table = %table_key(table.kind), error = %format!("{err:#}"), "iceberg metadata clean-up failed; the next run retries")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::iceberg::metadata::{MetadataLogEntry, SnapshotLogEntry};

    #[test]
    fn a_compacted_files_key_names_its_marker() {
        assert_eq!(
            marker_of_file("cuda/dt=2026-11-28/hour=03/compact-20261128T0415-a1-0003.parquet")
                .as_deref(),
            Some("cuda/dt=2026-11-28/hour=03/_compaction-20261128T0415-a1.json")
        );
        for other in [
            "cuda/dt=2026-11-28/hour=03/part-h-0.parquet",
            "cuda/dt=2026-11-28/hour=03/compact--0000.parquet",
            "cuda/dt=2026-11-28/hour=03/compact-r-.parquet",
            "cuda/dt=2026-11-28/hour=03/compact-r-00x1.parquet",
            "cuda/dt=2026-11-28/hour=03/compact-r-0000.parquet#2",
            "compact-r-0000.parquet",
        ] {
            assert_eq!(marker_of_file(other), None, "{other}");
        }
    }

    fn snapshot(id: i64) -> Snapshot {
        Snapshot {
            snapshot_id: id,
            parent_snapshot_id: (id > 1).then_some(id - 1),
            sequence_number: id,
            timestamp_ms: id * 1_000,
            manifest_list: format!("file:///snap-{id}.avro"),
            summary: Default::default(),
            schema_id: Some(7),
        }
    }

    #[test]
    fn expiry_keeps_the_newest_snapshots_and_log_entries() {
        let schema = crate::iceberg::schema::IcebergSchema::evolve(
            None,
            &arrow_schema::Schema::new(vec![arrow_schema::Field::new(
                "time",
                arrow_schema::DataType::Int64,
                false,
            )]),
            7,
            &mut 0,
        )
        .unwrap();
        let mut metadata = TableMetadata::new("u".into(), "file:///t".into(), &schema, 0);
        for id in 1..=5 {
            metadata.snapshots.push(snapshot(id));
            metadata.snapshot_log.push(SnapshotLogEntry {
                snapshot_id: id,
                timestamp_ms: id,
            });
            metadata.metadata_log.push(MetadataLogEntry {
                metadata_file: format!("file:///v{id}.metadata.json"),
                timestamp_ms: id,
            });
        }
        let mut all = metadata.clone();
        assert!(expire(&mut all, 10).is_empty(), "fewer than kept");
        assert_eq!(all, metadata);
        let expired = expire(&mut metadata, 2);
        assert_eq!(
            expired.iter().map(|s| s.snapshot_id).collect::<Vec<_>>(),
            [1, 2, 3]
        );
        let ids = |m: &TableMetadata| {
            m.snapshots
                .iter()
                .map(|s| s.snapshot_id)
                .collect::<Vec<_>>()
        };
        assert_eq!(ids(&metadata), [4, 5]);
        assert_eq!(metadata.snapshot_log.len(), 2);
        assert_eq!(
            metadata.metadata_log[0].metadata_file,
            "file:///v4.metadata.json"
        );
        // Keeping 0 keeps the current one.
        expire(&mut metadata, 0);
        assert_eq!(ids(&metadata), [5]);
    }

    #[test]
    fn only_old_metadata_files_and_unlisted_avro_files_go() {
        let referenced: BTreeSet<String> = ["snap-9.avro".to_string(), "m-9.avro".into()].into();
        let goes = |name: &str| is_unreferenced(name, (10, 3), &referenced);
        assert!(goes("v6.metadata.json"), "6 + 3 < 10");
        assert!(!goes("v7.metadata.json"));
        assert!(!goes("v10.metadata.json"));
        assert!(goes("snap-1.avro"));
        assert!(goes("m-1.avro"));
        assert!(!goes("m-9.avro"));
        assert!(!goes("snap-9.avro"));
        assert!(!goes("version-hint.text"));
        assert!(!goes("notes.txt"));
        assert!(!is_unreferenced(
            "v1.metadata.json",
            (u64::MAX, usize::MAX),
            &referenced
        ));
    }
}
