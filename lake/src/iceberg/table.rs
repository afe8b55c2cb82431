//! One Iceberg table of the lake (`<lake>/iceberg/<kind>/metadata/`) on its storage: the
//! current metadata file found, the compacted files of new markers appended as one snapshot,
//! and the live data files of the current snapshot listed for readers.
//!
//! A commit writes a manifest and a manifest list (new, uniquely named files no reader looks
//! at), then `v<N+1>.metadata.json`, created only if absent (a rename that never replaces on a
//! local disk, `If-None-Match` on S3): that file's appearance is the commit. Then
//! `version-hint.text` names it, for readers that go by the hint (DuckDB). The current version
//! is the highest metadata file present, whatever the hint says, so a run killed between the
//! two finds its commit; one killed before the metadata file leaves two unnamed Avro files and
//! the markers uncommitted, and the next run commits them. Which markers a table holds is in
//! its snapshots' summaries ([`MARKERS_KEY`]), so no marker's files are added twice.

use std::collections::BTreeSet;
use std::sync::Arc;

use anyhow::Context;
use arrow_schema::Schema;
use bytes::Bytes;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};
use parquet::file::metadata::{ParquetMetaData, ParquetMetaDataReader};
use parquet::file::statistics::Statistics;
use tokio::runtime::Runtime;

use super::avro::{self, DataFile, ManifestFile};
use super::metadata::{Snapshot, TableMetadata, MARKERS_KEY};
use super::schema::IcebergSchema;
use super::{expire, merge};
use crate::compact::phase::{Pauser, Phase};
use crate::storage::LakeStorage;
use gpuship_model::EventKind;

/// The file-metadata key under which the agents' Parquet sink writes the schema version.
const SCHEMA_VERSION_KEY: &str = "gpuship.schema_version";

/// The lake's folder of Iceberg tables, one per kind.
pub const ICEBERG_FOLDER: &str = "iceberg";
/// The file readers that go by a hint read the version from.
pub const VERSION_HINT: &str = "version-hint.text";

/// The folder of `kind`'s table (`iceberg/cuda`).
pub fn table_key(kind: EventKind) -> String {
    format!("{ICEBERG_FOLDER}/{kind}")
}

fn metadata_key(kind: EventKind, name: &str) -> String {
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

/// A compacted file to add, read from its footer.
#[derive(Debug, Clone)]
pub struct NewFile {
    /// Its key in the lake.
    pub key: String,
    /// Hours since the epoch of its hour folder.
    pub hour: i32,
    /// Rows (from its footer).
    pub rows: u64,
    /// Bytes.
    pub size: u64,
    /// Its columns.
    pub schema: Schema,
    /// `gpuship.schema_version` of its metadata.
    pub schema_version: i32,
    /// Least and greatest `time` (µs) and `host`, where every row group's statistics say.
    pub time_range: Option<(i64, i64)>,
    /// Least and greatest host.
    pub host_range: Option<(Vec<u8>, Vec<u8>)>,
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

    /// After the commit of `version`, which dropped the snapshots `expired`: deletes the
    /// metadata files older than the ones its log keeps, the Avro files that only expired
    /// snapshots read (their manifest lists and the manifests no kept snapshot lists), and Avro
    /// files nothing reads that are older than [`expire::ORPHAN_MIN_AGE`] (a killed run's
    /// unnamed files; a younger one may be another run's, not committed yet). A failure is
    /// logged: the commit stands, and the next run deletes what is left.
    fn clean_metadata_folder(&self, version: u64, metadata: &TableMetadata, expired: &[Snapshot]) {
        let cleaned = || -> anyhow::Result<usize> {
            let read_by = |snapshots: &[Snapshot], lenient: bool| {
                let mut names = BTreeSet::new();
                for snapshot in snapshots {
                    names.insert(file_name(&snapshot.manifest_list).to_string());
                    match manifests_of(self.storage, snapshot) {
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
            let prefix = metadata_key(self.kind, "");
            let listing = self.storage.list(&prefix)?;
            let now = chrono::Utc::now();
            let mut deleted = 0;
            for key in &listing.keys {
                let name = file_name(key);
                if !expire::is_unreferenced(name, (version, self.keep_snapshots), &referenced) {
                    continue;
                }
                let orphan = name.ends_with(".avro") && !expired_read.contains(name);
                if orphan {
                    let age = self
                        .storage
                        .stat(key)
                        .map(|meta| now.signed_duration_since(meta.last_modified))
                        .with_context(|| format!("reading the age of {key}"))?;
                    if age < expire::ORPHAN_MIN_AGE {
                        continue;
                    }
                }
                match self
                    .runtime
                    .block_on(self.store.delete(&Path::from(key.as_str())))
                {
                    Ok(()) | Err(object_store::Error::NotFound { .. }) => deleted += 1,
                    Err(err) => return Err(err).with_context(|| format!("deleting {key}")),
                }
            }
            Ok(deleted)
        };
        match cleaned() {
            Ok(0) => {}
            Ok(deleted) => {
                tracing::info!(table = %table_key(self.kind), deleted, "iceberg metadata files no kept snapshot reads deleted")
            }
            Err(err) => {
                tracing::warn!(table = %table_key(self.kind), error = %format!("{err:#}"), "iceberg metadata clean-up failed; the next run retries")
            }
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

    fn put(&self, key: &str, bytes: Vec<u8>, mode: PutMode) -> object_store::Result<()> {
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
            if let Some((version, _)) = &loaded {
                self.repair_hint(*version)?;
            }
            return Ok(Appended::default());
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
        let manifest = avro::write_manifest(
            &data_files,
            snapshot_id,
            &schema.to_json().to_string(),
            schema.schema_id,
            &metadata.partition_spec_fields().to_string(),
        )?;
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
            let kept = merge::kept_files(self.storage, &previous_manifests)?;
            let bytes = avro::write_kept_manifest(
                &kept,
                &schema.to_json().to_string(),
                schema.schema_id,
                &metadata.partition_spec_fields().to_string(),
            )?;
            let key = metadata_key(self.kind, &format!("{unique}-m1.avro"));
            let entry = merge::merged_entry(
                &kept,
                (self.storage.uri_of(&key), bytes.len() as i64),
                (snapshot_id, sequence_number),
            )?;
            self.put(&key, bytes, PutMode::Overwrite)
                .with_context(|| format!("writing {key}"))?;
            tracing::info!(table = %table_key(self.kind), manifests = replaced, files = kept.len(), "iceberg manifests merged into one");
            vec![entry]
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

        let total = |key: &str, added: u64| {
            let before = previous
                .as_ref()
                .and_then(|s| s.summary.get(key))
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0);
            (key.to_string(), (before + added).to_string())
        };
        let changed_partitions: BTreeSet<i32> = files.iter().map(|f| f.hour).collect();
        let marker_names: Vec<&str> = new.iter().map(|(m, _)| m.as_str()).collect();
        let summary = [
            ("operation".to_string(), "append".to_string()),
            ("added-data-files".into(), files.len().to_string()),
            ("added-records".into(), added_rows.to_string()),
            ("added-files-size".into(), added_bytes.to_string()),
            (
                "changed-partition-count".into(),
                changed_partitions.len().to_string(),
            ),
            total("total-data-files", files.len() as u64),
            total("total-records", added_rows),
            total("total-files-size", added_bytes),
            ("total-delete-files".into(), "0".into()),
            ("total-position-deletes".into(), "0".into()),
            ("total-equality-deletes".into(), "0".into()),
            (
                "manifests-created".into(),
                (1 + usize::from(merged)).to_string(),
            ),
            (
                "manifests-kept".into(),
                if merged { 0 } else { replaced }.to_string(),
            ),
            (
                "manifests-replaced".into(),
                if merged { replaced } else { 0 }.to_string(),
            ),
            (MARKERS_KEY.into(), marker_names.join("\n")),
        ]
        .into_iter()
        .collect();
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
        self.clean_metadata_folder(next, &metadata, &expired);
        Ok(Appended {
            version: next,
            files: files.len(),
            rows: added_rows,
        })
    }
}

/// The current metadata of `kind`'s table in `storage` and its version, `None` when the table
/// does not exist.
pub fn load(
    storage: &dyn LakeStorage,
    kind: EventKind,
) -> anyhow::Result<Option<(u64, TableMetadata)>> {
    let prefix = metadata_key(kind, "");
    let listing = storage
        .list(&prefix)
        .with_context(|| format!("listing {prefix}"))?;
    let latest = listing
        .keys
        .iter()
        .filter_map(|key| version_of(key.rsplit('/').next()?))
        .max();
    let Some(version) = latest else {
        return Ok(None);
    };
    let key = metadata_key(kind, &format!("v{version}.metadata.json"));
    let bytes = storage
        .get(&key)
        .with_context(|| format!("reading {key}"))?;
    let metadata: TableMetadata =
        serde_json::from_slice(&bytes).with_context(|| format!("{key} is not Iceberg"))?;
    Ok(Some((version, metadata)))
}

/// The markers whose files a table holds: those its snapshots name, and those its current
/// data files name (the markers of expired snapshots, [`expire::marker_of_file`]).
fn committed_markers(
    storage: &dyn LakeStorage,
    metadata: &TableMetadata,
) -> anyhow::Result<BTreeSet<String>> {
    let mut markers = metadata.committed_markers();
    for file in files_of(storage, metadata)? {
        if let Some(marker) = storage
            .key_of(&file.path)
            .and_then(|k| expire::marker_of_file(&k))
        {
            markers.insert(marker);
        }
    }
    Ok(markers)
}

/// The last part of a key or location.
fn file_name(location: &str) -> &str {
    location.rsplit('/').next().unwrap_or(location)
}

/// The live data files of the current snapshot of `kind`'s table (none for a table without
/// one, or no table).
pub fn current_files(storage: &dyn LakeStorage, kind: EventKind) -> anyhow::Result<Vec<DataFile>> {
    let Some((_, metadata)) = load(storage, kind)? else {
        return Ok(Vec::new());
    };
    files_of(storage, &metadata)
}

/// The live data files of `metadata`'s current snapshot.
fn files_of(storage: &dyn LakeStorage, metadata: &TableMetadata) -> anyhow::Result<Vec<DataFile>> {
    let mut files = Vec::new();
    for manifest in manifests(storage, metadata)? {
        let bytes = get_uri(storage, &manifest.path)?;
        files.extend(
            avro::read_manifest(&bytes)
                .map_err(anyhow::Error::msg)
                .with_context(|| format!("manifest {}", manifest.path))?,
        );
    }
    Ok(files)
}

fn manifests(
    storage: &dyn LakeStorage,
    metadata: &TableMetadata,
) -> anyhow::Result<Vec<ManifestFile>> {
    match metadata.current_snapshot() {
        Some(snapshot) => manifests_of(storage, snapshot),
        None => Ok(Vec::new()),
    }
}

/// The manifests `snapshot` lists.
fn manifests_of(
    storage: &dyn LakeStorage,
    snapshot: &Snapshot,
) -> anyhow::Result<Vec<ManifestFile>> {
    let bytes = get_uri(storage, &snapshot.manifest_list)?;
    avro::read_manifest_list(&bytes)
        .map_err(anyhow::Error::msg)
        .with_context(|| format!("manifest list {}", snapshot.manifest_list))
}

pub(super) fn get_uri(storage: &dyn LakeStorage, uri: &str) -> anyhow::Result<Bytes> {
    let key = storage
        .key_of(uri)
        .with_context(|| format!("{uri} is outside the lake"))?;
    storage.get(&key).with_context(|| format!("reading {uri}"))
}

/// A compacted file's facts from its footer (one or two requests on S3).
pub fn read_new_file(storage: &dyn LakeStorage, key: &str, hour: i32) -> anyhow::Result<NewFile> {
    let size = storage
        .stat(key)
        .with_context(|| format!("reading the size of {key}"))?
        .size;
    anyhow::ensure!(size >= 12, "{key}: {size} bytes is no Parquet file");
    let tail = storage.tail(key, size, 8)?;
    anyhow::ensure!(&tail[4..] == b"PAR1", "{key}: not a Parquet file");
    let footer_len = u64::from(u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]));
    anyhow::ensure!(
        footer_len + 8 <= size,
        "{key}: a footer longer than the file"
    );
    let footer = storage.tail(key, size, footer_len + 8)?;
    let metadata = ParquetMetaDataReader::decode_metadata(&footer[..footer_len as usize])
        .with_context(|| format!("{key}: its footer"))?;
    let file = metadata.file_metadata();
    let schema =
        parquet::arrow::parquet_to_arrow_schema(file.schema_descr(), file.key_value_metadata())
            .with_context(|| format!("{key}: its schema"))?;
    // The version is in the footer's key-value metadata (what the agents write) or in the
    // embedded Arrow schema's metadata (what any Arrow writer keeps); 1 when neither says.
    let schema_version = schema
        .metadata()
        .get(SCHEMA_VERSION_KEY)
        .cloned()
        .or_else(|| {
            file.key_value_metadata()
                .into_iter()
                .flatten()
                .find(|kv| kv.key == SCHEMA_VERSION_KEY)
                .and_then(|kv| kv.value.clone())
        })
        .and_then(|value| value.parse().ok())
        .unwrap_or(1);
    Ok(NewFile {
        key: key.to_string(),
        hour,
        rows: u64::try_from(file.num_rows()).unwrap_or(0),
        size,
        schema,
        schema_version,
        time_range: time_range(&metadata),
        host_range: host_range(&metadata),
    })
}

/// The index of the top-level leaf column `name`.
fn column(metadata: &ParquetMetaData, name: &str) -> Option<usize> {
    metadata
        .file_metadata()
        .schema_descr()
        .columns()
        .iter()
        .position(|c| c.path().string() == name)
}

fn time_range(metadata: &ParquetMetaData) -> Option<(i64, i64)> {
    let index = column(metadata, "time")?;
    let mut range: Option<(i64, i64)> = None;
    for group in metadata.row_groups() {
        let Some(Statistics::Int64(stats)) = group.column(index).statistics() else {
            return None;
        };
        let (low, high) = (*stats.min_opt()?, *stats.max_opt()?);
        range = Some(range.map_or((low, high), |(l, h)| (l.min(low), h.max(high))));
    }
    range
}

fn host_range(metadata: &ParquetMetaData) -> Option<(Vec<u8>, Vec<u8>)> {
    let index = column(metadata, "host")?;
    let mut range: Option<(Vec<u8>, Vec<u8>)> = None;
    for group in metadata.row_groups() {
        let Some(Statistics::ByteArray(stats)) = group.column(index).statistics() else {
            return None;
        };
        // A truncated bound is not the column's value: no bound then.
        if !stats.min_is_exact() || !stats.max_is_exact() {
            return None;
        }
        let low = stats.min_opt()?.data().to_vec();
        let high = stats.max_opt()?.data().to_vec();
        range = Some(match range {
            None => (low, high),
            Some((l, h)) => (l.min(low), h.max(high)),
        });
    }
    range
}

#[cfg(test)]
mod tests;
