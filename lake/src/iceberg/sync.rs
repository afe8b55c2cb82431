//! Keeps a REST catalog's entry of a table in step with the table's metadata files, which
//! stay the source of truth (gpuship-lake is each table's one writer).
//!
//! After every run (and every commit), for each table: a catalog without the table registers
//! it from the newest metadata file; a catalog whose entry is behind gets one commit that adds
//! what it lacks, in order: new schemas and the current one, changed properties, the
//! snapshots it has not seen, `main` moved to the current snapshot, and the snapshots expiry
//! dropped removed. The commit requires the entry to be the same table (its uuid) with `main`
//! where it was when loaded, so a concurrent change makes it fail (409) and it is made again
//! from a fresh load. A run killed between its metadata commit and the catalog's, or one that
//! found the catalog down, leaves the entry behind; the next run brings it up to date, so
//! nothing is ever committed twice or skipped.
//!
//! Refused, never overwritten: an entry of another table of the same name (another uuid), or
//! one holding a snapshot gpuship did not write (someone else appended through the catalog).

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::Context;
use serde_json::{json, Value};
use tokio::runtime::Runtime;

use super::metadata::{TableMetadata, MARKERS_KEY};
use super::rest::{CatalogError, RestCatalog};
use super::table::{metadata_key, table_key, Table};

/// Attempts per table and run (a conflict or an unavailable catalog is tried again).
const ATTEMPTS: u32 = 4;

/// What a catalog is told so that its entry holds what the metadata files hold.
#[derive(Debug, Clone, PartialEq)]
pub struct CatalogCommit {
    /// What the entry must still be.
    pub requirements: Vec<Value>,
    /// What changes, in order.
    pub updates: Vec<Value>,
}

/// What a sync did to the catalog's entry of a table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Synced {
    /// The catalog had no entry: registered from the newest metadata file.
    Registered,
    /// The entry was behind: one commit of this many updates.
    Committed(usize),
    /// The entry held what the files hold already.
    InStep,
}

fn snapshot_ids(metadata: &Value) -> Vec<i64> {
    metadata["snapshots"]
        .as_array()
        .map(|snapshots| {
            snapshots
                .iter()
                .filter_map(|s| s["snapshot-id"].as_i64())
                .collect()
        })
        .unwrap_or_default()
}

/// The commit that brings `theirs` (the catalog's metadata of the table) to `ours`, `None`
/// when it holds the same already; an error when `theirs` is not ours to change.
pub fn commit_for(ours: &TableMetadata, theirs: &Value) -> anyhow::Result<Option<CatalogCommit>> {
    let their_uuid = theirs["table-uuid"].as_str().unwrap_or_default();
    anyhow::ensure!(
        their_uuid.eq_ignore_ascii_case(&ours.table_uuid),
        "the catalog's entry is another table (uuid {their_uuid:?}, the lake's is {}): drop \
         that entry or choose another --catalog-namespace",
        ours.table_uuid
    );
    let mut updates = Vec::new();
    let their_schemas: BTreeSet<i64> = theirs["schemas"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s["schema-id"].as_i64())
        .collect();
    for schema in &ours.schemas {
        let id = schema["schema-id"].as_i64();
        if id.is_some_and(|id| !their_schemas.contains(&id)) {
            updates.push(json!({"action": "add-schema", "schema": schema}));
        }
    }
    if theirs["current-schema-id"].as_i64() != Some(i64::from(ours.current_schema_id)) {
        updates.push(json!({"action": "set-current-schema", "schema-id": ours.current_schema_id}));
    }
    let changed: serde_json::Map<String, Value> = ours
        .properties
        .iter()
        .filter(|(key, value)| theirs["properties"][key.as_str()].as_str() != Some(value.as_str()))
        .map(|(key, value)| (key.clone(), Value::String(value.clone())))
        .collect();
    if !changed.is_empty() {
        updates.push(json!({"action": "set-properties", "updates": changed}));
    }

    let theirs_ids = snapshot_ids(theirs);
    let ours_ids: BTreeSet<i64> = ours.snapshots.iter().map(|s| s.snapshot_id).collect();
    for snapshot in &ours.snapshots {
        if !theirs_ids.contains(&snapshot.snapshot_id) {
            updates.push(json!({"action": "add-snapshot", "snapshot": snapshot}));
        }
    }
    let their_main = theirs["refs"]["main"]["snapshot-id"]
        .as_i64()
        .or_else(|| theirs["current-snapshot-id"].as_i64().filter(|id| *id >= 0));
    if let Some(current) = ours.current_snapshot_id {
        if their_main != Some(current) {
            updates.push(json!({"action": "set-snapshot-ref", "ref-name": "main",
                "type": "branch", "snapshot-id": current}));
        }
    }
    let mut dropped = Vec::new();
    for snapshot in theirs["snapshots"].as_array().into_iter().flatten() {
        let Some(id) = snapshot["snapshot-id"].as_i64() else {
            continue;
        };
        if ours_ids.contains(&id) {
            continue;
        }
        // Only a snapshot gpuship wrote (and expiry dropped) is removed.
        anyhow::ensure!(
            snapshot["summary"][MARKERS_KEY].is_string(),
            "the catalog's entry holds snapshot {id}, which gpuship-lake did not write: \
             gpuship-lake compact must be the table's only writer (docs/operations.md); \
             nothing was changed"
        );
        dropped.push(id);
    }
    if !dropped.is_empty() {
        updates.push(json!({"action": "remove-snapshots", "snapshot-ids": dropped}));
    }
    if updates.is_empty() {
        return Ok(None);
    }
    let requirements = vec![
        json!({"type": "assert-table-uuid", "uuid": their_uuid}),
        json!({"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": their_main}),
    ];
    Ok(Some(CatalogCommit {
        requirements,
        updates,
    }))
}

/// Brings the catalog's entry of table `name` to `ours`, whose newest metadata file is at
/// `metadata_location`. A conflict or an unavailable catalog is tried again (at most
/// [`ATTEMPTS`] times, from a fresh load).
pub fn sync_table(
    catalog: &RestCatalog,
    runtime: &Runtime,
    name: &str,
    ours: &TableMetadata,
    metadata_location: &str,
) -> anyhow::Result<Synced> {
    let mut last = None;
    for attempt in 0..ATTEMPTS {
        if attempt > 0 {
            std::thread::sleep(Duration::from_millis(250 << attempt));
        }
        let outcome = (|| -> Result<Synced, SyncError> {
            match catalog.load(runtime, name)? {
                None => {
                    catalog.create_namespace(runtime)?;
                    catalog.register(runtime, name, metadata_location)?;
                    Ok(Synced::Registered)
                }
                Some(entry) => match commit_for(ours, &entry.metadata).map_err(SyncError::Ours)? {
                    None => Ok(Synced::InStep),
                    Some(commit) => {
                        catalog.commit(runtime, name, &commit.requirements, &commit.updates)?;
                        Ok(Synced::Committed(commit.updates.len()))
                    }
                },
            }
        })();
        match outcome {
            Ok(synced) => return Ok(synced),
            Err(SyncError::Catalog(
                err @ (CatalogError::Conflict(_) | CatalogError::Unavailable(_)),
            )) => {
                tracing::warn!(table = name, attempt = attempt + 1, error = %err, "the REST catalog did not take the table's state; trying again");
                last = Some(err);
            }
            Err(SyncError::Catalog(err)) => return Err(err.into()),
            Err(SyncError::Ours(err)) => return Err(err),
        }
    }
    Err(last
        .map(anyhow::Error::from)
        .unwrap_or_else(|| anyhow::anyhow!("no attempt made")))
    .with_context(|| format!("{ATTEMPTS} attempts"))
}

/// Brings `table`'s REST catalog entry, if it has a catalog, to `metadata` (version
/// `version`): `Err` says why the entry is still behind.
pub fn catch_up(
    table: &Table<'_>,
    version: u64,
    metadata: &TableMetadata,
) -> Option<Result<Synced, String>> {
    let catalog = table.catalog?;
    let location = table.storage.uri_of(&metadata_key(
        table.kind,
        &format!("v{version}.metadata.json"),
    ));
    let name = table.kind.as_str();
    let outcome = sync_table(catalog, table.runtime, name, metadata, &location);
    Some(match outcome {
        Ok(synced) => {
            tracing::info!(table = %table_key(table.kind), catalog = catalog.uri(), namespace = %catalog.namespace(), ?synced, "REST catalog in step");
            Ok(synced)
        }
        Err(err) => Err(format!(
            "{}.{name} in the REST catalog {} is behind v{version} (the next run brings it up \
             to date): {err:#}",
            catalog.namespace(),
            catalog.uri()
        )),
    })
}

enum SyncError {
    Catalog(CatalogError),
    Ours(anyhow::Error),
}

impl From<CatalogError> for SyncError {
    fn from(err: CatalogError) -> Self {
        SyncError::Catalog(err)
    }
}

#[cfg(test)]
mod tests;
