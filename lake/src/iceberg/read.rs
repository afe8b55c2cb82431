//! What an Iceberg table holds, read from its metadata folder: the current metadata file, the
//! manifests and live data files of its snapshots, and the markers it has committed.

use std::collections::BTreeSet;

use anyhow::Context;
use bytes::Bytes;
use gpuship_model::EventKind;

use super::avro::{self, DataFile, ManifestFile};
use super::expire;
use super::metadata::{Snapshot, TableMetadata};
use super::table::{metadata_key, version_of};
use crate::storage::LakeStorage;

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
pub(super) fn committed_markers(
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
pub(super) fn file_name(location: &str) -> &str {
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

pub(super) fn manifests(
    storage: &dyn LakeStorage,
    metadata: &TableMetadata,
) -> anyhow::Result<Vec<ManifestFile>> {
    match metadata.current_snapshot() {
        Some(snapshot) => manifests_of(storage, snapshot),
        None => Ok(Vec::new()),
    }
}

/// The manifests `snapshot` lists.
pub(super) fn manifests_of(
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
