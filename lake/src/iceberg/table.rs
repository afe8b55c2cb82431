//! One Iceberg table of the lake (`<lake>/iceberg/<kind>/metadata/`) on its storage: the
//! compacted files of new markers appended as one snapshot ([`super::read`] says what the
//! table holds).
//!
//! A commit writes a manifest and a manifest list (new, uniquely named files no reader looks
//! at), then `v<N+1>.metadata.json`, created only if absent (a rename that never replaces on a
//! local disk, `If-None-Match` on S3): that file's appearance is the commit. Then
//! `version-hint.text` names it, for readers that go by the hint (DuckDB). The current version
//! is the highest metadata file present, whatever the hint says, so a run killed between the
//! two finds its commit; one killed before the metadata file leaves two unnamed Avro files and
//! the markers uncommitted, and the next run commits them. Which markers a table holds is in
//! its snapshots' summaries ([`MARKERS_KEY`]) and its data files' names, so no marker's files
//! are added twice.

use std::collections::BTreeSet;
use std::sync::Arc;

use anyhow::Context;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};
use tokio::runtime::Runtime;

use super::avro::{self, DataFile, ManifestFile};
pub use super::footer::{read_new_file, NewFile};
use super::metadata::{AppendSummary, Snapshot, TableMetadata};
use super::read::{committed_markers, manifests};
pub use super::read::{current_files, load};
use super::rest::RestCatalog;
use super::schema::IcebergSchema;
use super::sync::Synced;
use super::{expire, merge};
use crate::compact::phase::{Pauser, Phase};
use crate::storage::LakeStorage;
use gpuship_model::EventKind;

/// The lake's folder of Iceberg tables, one per kind.
pub const ICEBERG_FOLDER: &str = "iceberg";
/// The file readers that go by a hint read the version from.
pub const VERSION_HINT: &str = "version-hint.text";

/// The folder of `kind`'s table (`iceberg/cuda`).
pub fn table_key(kind: EventKind) -> String {
    format!("{ICEBERG_FOLDER}/{kind}")
}

pub(super) fn metadata_key(kind: EventKind, name: &str) -> String {
    format!("{}/metadata/{name}", table_key(kind))
}

/// The version of a `v<N>.metadata.json` name.
pub(super) fn version_of(name: &str) -> Option<u64> {
    let digits = name.strip_prefix('v')?.strip_suffix(".metadata.json")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// What an append did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Appended {
    /// The metadata version written (0 when nothing was new).
    pub version: u64,
    /// Data files added.
    pub files: usize,
    /// Rows added.
    pub rows: u64,
    /// What the REST catalog was told (`None` without one): `Err` names why its entry is
    /// still behind (the next run brings it up to date).
    pub catalog: Option<Result<Synced, String>>,
}

/// A kind's table on the lake's storage.
pub struct Table<'a> {
    /// Listing and reading.
    pub storage: &'a dyn LakeStorage,
    /// Writing.
    pub store: Arc<dyn ObjectStore>,
    /// Drives the store.
    pub runtime: &'a Runtime,
    /// Which table.
    pub kind: EventKind,
    /// Manifests its current snapshot may list before a commit merges them
    /// ([`super::merge`]).
    pub merge_manifests_at: usize,
    /// Snapshots (and earlier metadata files) a commit keeps ([`super::expire`]).
    pub keep_snapshots: usize,
    /// A REST catalog kept in step with the table ([`super::sync`]), if one is configured.
    pub catalog: Option<&'a RestCatalog>,
}

impl Table<'_> {
    /// The current metadata and its version, `None` when the table does not exist yet.
    pub fn load(&self) -> anyhow::Result<Option<(u64, TableMetadata)>> {
        load(self.storage, self.kind)
    }

    /// The markers whose files the table holds.
    pub fn committed_markers(&self) -> anyhow::Result<BTreeSet<String>> {
        match self.load()? {
            Some((_, metadata)) => committed_markers(self.storage, &metadata),
            None => Ok(BTreeSet::new()),
        }
    }

    fn manifests(&self, metadata: &TableMetadata) -> anyhow::Result<Vec<ManifestFile>> {
        manifests(self.storage, metadata)
    }

    /// Names `version` in the hint.
    fn write_hint(&self, version: u64) -> anyhow::Result<()> {
        let hint = metadata_key(self.kind, VERSION_HINT);
        // No newline: DuckDB reads the whole file as the version.
        self.put(&hint, version.to_string().into_bytes(), PutMode::Overwrite)
            .with_context(|| format!("writing {hint}"))
    }

    /// Writes the hint when it does not name `version`, the current one.
    fn repair_hint(&self, version: u64) -> anyhow::Result<()> {
        let hint = metadata_key(self.kind, VERSION_HINT);
        let named = self.storage.get(&hint).ok();
        if named.as_deref() == Some(version.to_string().as_bytes()) {
            return Ok(());
        }
        tracing::warn!(table = %table_key(self.kind), version, "the version hint was behind the table's metadata; rewritten");
        self.write_hint(version)
    }

    /// Deletes `key` (one already gone counts as deleted).
    pub(super) fn delete(&self, key: &str) -> object_store::Result<()> {
        match self.runtime.block_on(self.store.delete(&Path::from(key))) {
            Err(object_store::Error::NotFound { .. }) => Ok(()),
            other => other,
        }
    }

    pub(super) fn put(&self, key: &str, bytes: Vec<u8>, mode: PutMode) -> object_store::Result<()> {
        let options = PutOptions {
            mode,
            ..Default::default()
        };
        self.runtime
            .block_on(
                self.store
                    .put_opts(&Path::from(key), PutPayload::from(bytes), options),
            )
            .map(|_| ())
    }

    /// Adds `files`, the compacted files of `markers`, as one snapshot. Markers the table holds
    /// already and their files are left out (a rerun after a kill).
    pub fn append(
        &self,
        markers: &[(String, Vec<NewFile>)],
        pauser: Pauser,
        now_ms: i64,
    ) -> anyhow::Result<Appended> {
        let loaded = self.load()?;
        let committed = match &loaded {
            Some((_, metadata)) => committed_markers(self.storage, metadata)?,
            None => BTreeSet::new(),
        };
        let new: Vec<&(String, Vec<NewFile>)> = markers
            .iter()
            .filter(|(marker, _)| !committed.contains(marker))
            .collect();
        let mut files: Vec<&NewFile> = new.iter().flat_map(|(_, f)| f).collect();
        if files.is_empty() {
            // A run killed after its commit left the hint behind: readers that go by it would
            // miss the commit (or find no table at all), so it is brought up to date.
            let Some((version, metadata)) = &loaded else {
                return Ok(Appended::default());
            };
            self.repair_hint(*version)?;
            return Ok(Appended {
                catalog: super::sync::catch_up(self, *version, metadata),
                ..Appended::default()
            });
        }
        // Older schema versions first: each file's columns evolve the schema in turn.
        files.sort_by_key(|f| f.schema_version);
        let (version, metadata) = match loaded {
            Some((version, metadata)) => (version, Some(metadata)),
            None => (0, None),
        };
        let mut schema = metadata
            .as_ref()
            .map(TableMetadata::current_schema)
            .transpose()
            .map_err(anyhow::Error::msg)?;
        let mut last_column_id = metadata.as_ref().map_or(0, |m| m.last_column_id);
        let used_ids: BTreeSet<i64> = metadata
            .iter()
            .flat_map(|m| m.schemas.iter().filter_map(|s| s["schema-id"].as_i64()))
            .collect();
        for file in &files {
            let mut id = file.schema_version;
            if used_ids.contains(&i64::from(id)) && schema.as_ref().map(|s| s.schema_id) != Some(id)
            {
                id = used_ids.iter().max().map_or(id, |m| *m as i32 + 1);
            }
            let next =
                IcebergSchema::evolve(schema.as_ref(), &file.schema, id, &mut last_column_id)
                    .with_context(|| format!("{}: its columns do not fit the table", file.key))?;
            schema = Some(next);
        }
        let Some(schema) = schema else {
            unreachable!("files is not empty, so a schema was made")
        };
        let location = self.storage.uri_of(&table_key(self.kind));
        let mut metadata = metadata.unwrap_or_else(|| {
            TableMetadata::new(
                uuid::Uuid::new_v4().to_string(),
                location.clone(),
                &schema,
                now_ms,
            )
        });
        let previous = metadata.current_snapshot().cloned();
        let previous_manifests = self.manifests(&metadata)?;
        metadata.set_schema(&schema);

        let snapshot_id = (uuid::Uuid::new_v4().as_u128() as i64) & i64::MAX;
        let sequence_number = metadata.last_sequence_number + 1;
        let (time_id, host_id) = (schema.field_id("time"), schema.field_id("host"));
        let data_files: Vec<DataFile> = files
            .iter()
            .map(|f| {
                let mut bounds = Vec::new();
                if let (Some(id), Some((low, high))) = (time_id, f.time_range) {
                    bounds.push((id, low.to_le_bytes().to_vec(), high.to_le_bytes().to_vec()));
                }
                if let (Some(id), Some((low, high))) = (host_id, &f.host_range) {
                    bounds.push((id, low.clone(), high.clone()));
                }
                DataFile {
                    path: self.storage.uri_of(&f.key),
                    hour: f.hour,
                    records: f.rows as i64,
                    size: f.size as i64,
                    bounds,
                }
            })
            .collect();
        let (schema_json, spec) = (
            schema.to_json().to_string(),
            metadata.partition_spec_fields().to_string(),
        );
        let header = (schema_json.as_str(), schema.schema_id, spec.as_str());
        let manifest = avro::write_manifest(&data_files, snapshot_id, header)?;
        let unique = uuid::Uuid::new_v4();
        let manifest_key = metadata_key(self.kind, &format!("{unique}-m0.avro"));
        let added_rows: u64 = files.iter().map(|f| f.rows).sum();
        let added_bytes: u64 = files.iter().map(|f| f.size).sum();
        let hours = (
            files.iter().map(|f| f.hour).min().unwrap_or(0),
            files.iter().map(|f| f.hour).max().unwrap_or(0),
        );
        let replaced = previous_manifests.len();
        let merged = merge::should_merge(&previous_manifests, self.merge_manifests_at);
        let mut manifests = if merged {
            let key = metadata_key(self.kind, &format!("{unique}-m1.avro"));
            let ids = (snapshot_id, sequence_number);
            vec![merge::write_merged(
                self,
                &previous_manifests,
                &key,
                ids,
                header,
            )?]
        } else {
            previous_manifests
        };
        manifests.push(ManifestFile {
            path: self.storage.uri_of(&manifest_key),
            length: manifest.len() as i64,
            sequence_number,
            added_snapshot_id: snapshot_id,
            added_files: i32::try_from(files.len()).context("too many files in one commit")?,
            added_rows: added_rows as i64,
            existing_files: 0,
            existing_rows: 0,
            min_sequence_number: sequence_number,
            hours,
        });
        self.put(&manifest_key, manifest, PutMode::Overwrite)
            .with_context(|| format!("writing {manifest_key}"))?;
        let list = avro::write_manifest_list(
            &manifests,
            snapshot_id,
            previous.as_ref().map(|s| s.snapshot_id),
            sequence_number,
        )?;
        let list_key = metadata_key(
            self.kind,
            &format!("snap-{snapshot_id}-1-{}.avro", uuid::Uuid::new_v4()),
        );
        self.put(&list_key, list, PutMode::Overwrite)
            .with_context(|| format!("writing {list_key}"))?;
        pauser.reached(Phase::IcebergWritten);

        let summary = AppendSummary {
            files: files.len(),
            rows: added_rows,
            bytes: added_bytes,
            partitions: files
                .iter()
                .map(|f| f.hour)
                .collect::<BTreeSet<i32>>()
                .len(),
            manifests_replaced: replaced,
            merged,
            markers: new.iter().map(|(m, _)| m.as_str()).collect(),
        }
        .summary(previous.as_ref());
        let previous_file = (version > 0).then(|| {
            (
                self.storage.uri_of(&metadata_key(
                    self.kind,
                    &format!("v{version}.metadata.json"),
                )),
                metadata.last_updated_ms,
            )
        });
        metadata.add_snapshot(
            Snapshot {
                snapshot_id,
                parent_snapshot_id: previous.as_ref().map(|s| s.snapshot_id),
                sequence_number,
                timestamp_ms: now_ms.max(metadata.last_updated_ms),
                manifest_list: self.storage.uri_of(&list_key),
                summary,
                schema_id: Some(schema.schema_id),
            },
            previous_file,
        );
        let expired = expire::expire(&mut metadata, self.keep_snapshots);
        let next = version
            .checked_add(1)
            .context("the table's metadata version is at its limit")?;
        let key = metadata_key(self.kind, &format!("v{next}.metadata.json"));
        let text = serde_json::to_vec_pretty(&metadata)?;
        match self.put(&key, text.clone(), PutMode::Create) {
            Ok(()) => {}
            Err(object_store::Error::AlreadyExists { .. }) => anyhow::bail!(
                "{key} was written by another run meanwhile; nothing committed (run again)"
            ),
            // A store without conditional writes: one compaction per lake is the scheduler's
            // rule (docs/operations.md), so the check is made before the write instead.
            Err(object_store::Error::NotImplemented { .. })
            | Err(object_store::Error::NotSupported { .. }) => {
                anyhow::ensure!(
                    self.storage.stat(&key).is_err(),
                    "{key} was written by another run meanwhile; nothing committed (run again)"
                );
                self.put(&key, text, PutMode::Overwrite)
                    .with_context(|| format!("committing {key}"))?;
            }
            Err(err) => return Err(err).with_context(|| format!("committing {key}")),
        }
        tracing::info!(table = %table_key(self.kind), version = next, files = files.len(), rows = added_rows, "iceberg snapshot committed");
        pauser.reached(Phase::IcebergCommitted);
        self.write_hint(next)?;
        if !expired.is_empty() {
            tracing::info!(table = %table_key(self.kind), expired = expired.len(), kept = metadata.snapshots.len(), "iceberg snapshots expired");
        }
        // The catalog first: its entry may still read the snapshots expiry dropped, so their
        // files are deleted only once it no longer lists them (the next run otherwise).
        let catalog = super::sync::catch_up(self, next, &metadata);
        if !matches!(catalog, Some(Err(_))) {
            expire::clean_metadata_folder(self, next, &metadata, &expired);
        }
        Ok(Appended {
            version: next,
            files: files.len(),
            rows: added_rows,
            catalog,
        })
    }
}

#[cfg(test)]
mod tests;
