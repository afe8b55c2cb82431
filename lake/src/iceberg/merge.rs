//! Manifest merging: a table appended to by every compaction run gains one manifest per run
//! (8,760 a year for an hourly timer), and every reader opens every manifest of the current
//! snapshot to plan a scan. When a commit would leave more than the table's limit
//! (`--merge-manifests-at`, default [`MERGE_MANIFESTS_AT`], Iceberg's own
//! `commit.manifest.min-count-to-merge`), the commit first rewrites the previous manifests
//! into one, whose entries keep each file with the snapshot and sequence numbers it was added
//! with (status EXISTING), and lists that one beside the run's new manifest: readers then open
//! two.
//!
//! Nothing is deleted: the merged-away manifests stay, so older snapshots (time travel) read as
//! they did. The merged manifest is a new, uniquely named file written before the commit, like
//! the run's own; a run killed before its metadata file leaves it unnamed and harmless.

use anyhow::Context;
use object_store::PutMode;

use super::avro::{self, KeptFile, ManifestFile, ManifestHeader};
use super::table::{table_key, Table};
use crate::storage::LakeStorage;

/// Manifests a snapshot may list before the next commit merges them.
pub const MERGE_MANIFESTS_AT: usize = 100;

/// Whether a commit that adds one manifest to `manifests` merges them first (`limit` 0 or 1
/// merges at every commit that has a previous manifest).
pub fn should_merge(manifests: &[ManifestFile], limit: usize) -> bool {
    !manifests.is_empty() && manifests.len() + 1 > limit.max(1)
}

/// Every live file of `manifests`, with the snapshot and sequence numbers it was added with
/// (an added entry's inherited from its manifest's list entry, as the specification says).
pub fn kept_files(
    storage: &dyn LakeStorage,
    manifests: &[ManifestFile],
) -> anyhow::Result<Vec<KeptFile>> {
    let mut kept = Vec::new();
    for manifest in manifests {
        let bytes = super::read::get_uri(storage, &manifest.path)?;
        let entries = avro::read_entries(&bytes)
            .map_err(anyhow::Error::msg)
            .with_context(|| format!("manifest {}", manifest.path))?;
        for entry in entries {
            kept.push(KeptFile {
                file: entry.file,
                snapshot_id: entry.snapshot_id.unwrap_or(manifest.added_snapshot_id),
                sequence_number: entry.sequence_number.unwrap_or(manifest.sequence_number),
                file_sequence_number: entry
                    .file_sequence_number
                    .unwrap_or(manifest.sequence_number),
            });
        }
    }
    Ok(kept)
}

/// Writes one manifest keeping every file of `previous` to `key` for snapshot `snapshot_id` at
/// `sequence_number`; returns its list entry, which replaces all of `previous`.
pub fn write_merged(
    table: &Table<'_>,
    previous: &[ManifestFile],
    key: &str,
    (snapshot_id, sequence_number): (i64, i64),
    header: ManifestHeader<'_>,
) -> anyhow::Result<ManifestFile> {
    let kept = kept_files(table.storage, previous)?;
    let bytes = avro::write_kept_manifest(&kept, header)?;
    let location = (table.storage.uri_of(key), bytes.len() as i64);
    let entry = merged_entry(&kept, location, (snapshot_id, sequence_number))?;
    table
        .put(key, bytes, PutMode::Overwrite)
        .with_context(|| format!("writing {key}"))?;
    tracing::info!(table = %table_key(table.kind), manifests = previous.len(), files = kept.len(), "iceberg manifests merged into one");
    Ok(entry)
}

/// The list entry of a merged manifest of `kept` at `path` (`length` bytes), written by
/// snapshot `snapshot_id` at `sequence_number`.
pub fn merged_entry(
    kept: &[KeptFile],
    (path, length): (String, i64),
    (snapshot_id, sequence_number): (i64, i64),
) -> anyhow::Result<ManifestFile> {
    let hours = (
        kept.iter().map(|k| k.file.hour).min().unwrap_or(0),
        kept.iter().map(|k| k.file.hour).max().unwrap_or(0),
    );
    Ok(ManifestFile {
        path,
        length,
        sequence_number,
        added_snapshot_id: snapshot_id,
        added_files: 0,
        added_rows: 0,
        existing_files: i32::try_from(kept.len()).context("too many files in one manifest")?,
        existing_rows: kept.iter().map(|k| k.file.records).sum(),
        min_sequence_number: kept
            .iter()
            .map(|k| k.sequence_number)
            .min()
            .unwrap_or(sequence_number),
        hours,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::iceberg::avro::DataFile;

    fn manifest(sequence_number: i64) -> ManifestFile {
        ManifestFile {
            path: format!("file:///m{sequence_number}.avro"),
            length: 1,
            sequence_number,
            added_snapshot_id: sequence_number * 10,
            added_files: 1,
            added_rows: 5,
            existing_files: 0,
            existing_rows: 0,
            min_sequence_number: sequence_number,
            hours: (1, 1),
        }
    }

    #[test]
    fn a_commit_merges_once_the_limit_would_be_passed() {
        let three: Vec<ManifestFile> = (1..=3).map(manifest).collect();
        assert!(!should_merge(&[], 1), "nothing to merge");
        assert!(!should_merge(&three, 4), "3 + 1 fit in 4");
        assert!(should_merge(&three, 3));
        assert!(should_merge(&three[..1], 0), "0 merges every time");
        assert!(should_merge(&three[..1], 1));
    }

    #[test]
    fn the_merged_entry_counts_the_kept_files_and_their_least_sequence_number() {
        let file = |hour: i32, records: i64| DataFile {
            path: format!("file:///{hour}.parquet"),
            hour,
            records,
            size: 1,
            bounds: Vec::new(),
        };
        let kept = vec![
            KeptFile {
                file: file(7, 10),
                snapshot_id: 1,
                sequence_number: 4,
                file_sequence_number: 4,
            },
            KeptFile {
                file: file(3, i64::MAX - 10),
                snapshot_id: 2,
                sequence_number: 2,
                file_sequence_number: 2,
            },
        ];
        let entry = merged_entry(&kept, ("file:///m.avro".into(), 9), (99, 5)).unwrap();
        assert_eq!(
            (entry.existing_files, entry.existing_rows, entry.added_files),
            (2, i64::MAX, 0)
        );
        assert_eq!(
            (
                entry.sequence_number,
                entry.min_sequence_number,
                entry.added_snapshot_id
            ),
            (5, 2, 99)
        );
        assert_eq!(entry.hours, (3, 7));
    }
}
