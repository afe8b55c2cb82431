//! Which files of a table a read uses, decided before the engine opens any: the listing of the
//! `dt=` folders of the range, hour folders outside it pruned by name, hidden, in-progress and
//! non-Parquet names left alone, and every remaining file checked without reading it (a FIFO,
//! a device or a file this user may not read is reported and left out, never waited on).
//! Compacted hours are read by the rule of [`crate::compact::rule`]: each row once, whether the
//! compaction of the hour has not started, is running, was killed or is done.

use std::collections::{BTreeMap, HashMap};

use bytes::Bytes;
use object_store::ObjectMeta;

use crate::compact::marker::Marker;
use crate::compact::rollup::{rollup_folder, ROLLED_UP_TABLE};
use crate::compact::rule::{self, HourFolder};
use crate::partition;
use crate::range::TimeRange;
use crate::storage::{LakeStorage, Unreadable};
use crate::whole_file::WHOLE_FILE_LIMIT;

/// The files of one table for a range.
#[derive(Debug, Default, Clone)]
pub struct Inventory {
    /// Files to read.
    pub files: Vec<ObjectMeta>,
    /// Files whose partitions lie outside the range (never fetched).
    pub pruned: usize,
    /// Hidden or in-progress files (names starting with `.`), non-Parquet files, files
    /// outside `dt=`/`hour=` folders, and the files the compaction rule leaves out (agents'
    /// files a committed compaction replaced, compacted files not committed), left alone.
    pub ignored: usize,
    /// Files and folders that could not be listed or opened, with why.
    pub unreadable: Vec<Unreadable>,
    /// Compacted `cuda_stats` files left out because their hour's roll-up was read instead
    /// ([`take_rolled_up`]).
    pub rolled_up: usize,
}

/// The largest footer (Parquet metadata) read: gpuship's files have footers of a few KiB.
pub const MAX_FOOTER: u64 = 64 << 20;

/// For a file larger than [`WHOLE_FILE_LIMIT`] (smaller ones are read whole, within that
/// size), its footer's magic and length, checked against its size before the engine reads
/// it: garbage there, or a footer that claims more than the file holds or more than
/// [`MAX_FOOTER`], and the file is left out instead of allocated for.
fn check_footer(storage: &dyn LakeStorage, key: &str, size: u64) -> Result<(), String> {
    if size <= WHOLE_FILE_LIMIT {
        return Ok(());
    }
    let tail = storage.tail(key, size, 8).map_err(|e| e.to_string())?;
    if tail.len() != 8 || &tail[4..] != b"PAR1" {
        return Err(format!(
            "not a Parquet file: the last 4 of its {size} bytes are not PAR1 (garbage, or a \
             sparse or truncated file)"
        ));
    }
    let footer = u64::from(u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]));
    if footer + 12 > size {
        return Err(format!(
            "damaged Parquet footer: it claims {footer} bytes of metadata, more than the \
             {size}-byte file holds"
        ));
    }
    if footer > MAX_FOOTER {
        return Err(format!(
            "Parquet footer of {footer} bytes, over the {MAX_FOOTER} bytes the lake reads"
        ));
    }
    Ok(())
}

/// True for a key under `<table>/dt=.../hour=.../`, the folders the engine partitions by.
pub(crate) fn in_hour_folder(key: &str) -> bool {
    let parts: Vec<&str> = key.split('/').collect();
    parts.len() == 4 && parts[1].starts_with("dt=") && parts[2].starts_with("hour=")
}

/// The files of `table` for `range` in `storage`.
pub fn take(
    storage: &dyn LakeStorage,
    table: &str,
    range: &TimeRange,
) -> Result<Inventory, anyhow::Error> {
    take_hours(storage, table, range, false)
}

/// The files of `cuda_stats` for `range`, its hourly roll-up ([`crate::compact::rollup`]) in
/// place of the compacted files it sums wherever the range covers the hour whole: the same
/// counts and histograms per process, function and result, in a 360th of the rows, but one row
/// per hour, so only for the readers that add rows up (the report's per-function statistics).
/// A roll-up file that is missing or of another size than its marker says is logged and the
/// compacted files are read instead.
pub fn take_rolled_up(
    storage: &dyn LakeStorage,
    range: &TimeRange,
) -> Result<Inventory, anyhow::Error> {
    take_hours(storage, ROLLED_UP_TABLE, range, true)
}

fn take_hours(
    storage: &dyn LakeStorage,
    table: &str,
    range: &TimeRange,
    rollups: bool,
) -> Result<Inventory, anyhow::Error> {
    use anyhow::Context;
    let mut inventory = Inventory::default();
    let mut in_range = Vec::new();
    for prefix in partition::prefixes(table, range) {
        let listing = storage
            .list(&prefix)
            .with_context(|| format!("listing {prefix} in {}", storage.describe()))?;
        for folder in listing.unreadable {
            tracing::warn!(folder = %folder.key, error = %folder.error, "skipping a folder that cannot be listed");
            inventory.unreadable.push(folder);
        }
        let mut hours: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for key in listing.keys {
            match key.rsplit_once('/') {
                Some((folder, _)) if in_hour_folder(&key) => {
                    hours.entry(folder.to_string()).or_default().push(key);
                }
                _ => inventory.ignored += 1,
            }
        }
        for (folder, keys) in hours {
            let hour = HourFolder::classify(&folder, keys);
            inventory.ignored += hour.markers.len() + hour.rest.len();
            if partition::may_overlap(&format!("{folder}/"), range) {
                in_range.push(hour);
            } else {
                inventory.pruned += hour.sources.len() + hour.outputs.len() + hour.others.len();
            }
        }
    }
    let mut markers = fetch_markers(storage, &in_range);
    for hour in &in_range {
        let whole = rollups
            && partition::span_of(&format!("{}/", hour.folder))
                .is_some_and(|(start, end)| range.since() <= start && end <= range.until());
        take_hour(storage, hour, &mut markers, &mut inventory, whole);
    }
    Ok(inventory)
}

/// The files of `kind` for `range` from its Iceberg table's current snapshot
/// ([`crate::iceberg`]): no folder is listed; only compacted hours are there. A data file
/// outside the lake, missing, or of another size than the table says is reported and left out.
pub fn take_iceberg(
    storage: &dyn LakeStorage,
    kind: gpuship_model::EventKind,
    range: &TimeRange,
) -> Result<Inventory, anyhow::Error> {
    use anyhow::Context;
    let mut inventory = Inventory::default();
    let files = crate::iceberg::table::current_files(storage, kind).with_context(|| {
        format!(
            "the Iceberg table {} in {}",
            crate::iceberg::table_folder(kind),
            storage.describe()
        )
    })?;
    for file in files {
        let Some(key) = storage.key_of(&file.path) else {
            inventory.unreadable.push(Unreadable {
                key: file.path,
                error: "a data file outside the lake".into(),
            });
            continue;
        };
        if !partition::may_overlap(&key, range) {
            inventory.pruned += 1;
            continue;
        }
        let checked = storage
            .stat(&key)
            .map_err(|e| e.to_string())
            .and_then(|meta| {
                if i64::try_from(meta.size) != Ok(file.size) {
                    return Err(format!(
                        "{} bytes, the Iceberg table says {}",
                        meta.size, file.size
                    ));
                }
                check_footer(storage, &key, meta.size)?;
                Ok(meta)
            });
        match checked {
            Ok(meta) => inventory.files.push(meta),
            Err(error) => {
                tracing::warn!(file = %key, %error, "skipping a file that cannot be read");
                inventory.unreadable.push(Unreadable { key, error });
            }
        }
    }
    Ok(inventory)
}

/// How many compaction markers are fetched at once: on S3 each is a request of tens of
/// milliseconds, and a day of one table has 24 of them.
const MARKER_FETCHES: usize = 16;

/// The content of every marker of `hours`, by key, fetched [`MARKER_FETCHES`] at a time.
fn fetch_markers(
    storage: &dyn LakeStorage,
    hours: &[HourFolder],
) -> HashMap<String, Result<Bytes, String>> {
    let keys: Vec<&str> = hours
        .iter()
        .flat_map(|h| h.markers.iter().map(String::as_str))
        .collect();
    let fetched = crate::storage::get_many(storage, &keys, MARKER_FETCHES);
    keys.into_iter().map(str::to_string).zip(fetched).collect()
}

/// The files a reader reads of one hour folder, by the compaction rule ([`rule`]): committed
/// compacted files instead of the agents' files they replaced, never a compacted file that no
/// committed marker names; with `rollups`, each marker's roll-up instead of its compacted files
/// where it has a whole one.
fn take_hour(
    storage: &dyn LakeStorage,
    hour: &HourFolder,
    fetched: &mut HashMap<String, Result<Bytes, String>>,
    inventory: &mut Inventory,
    rollups: bool,
) {
    let (markers, damaged) = rule::load_markers(hour, |key| {
        fetched
            .remove(key)
            .unwrap_or_else(|| Err("not fetched".to_string()))
    });
    for marker in damaged {
        tracing::warn!(marker = %marker.key, error = %marker.reason, "skipping a compaction marker that cannot be read; the hour's agents' files are read instead");
        inventory.unreadable.push(Unreadable {
            key: marker.key,
            error: format!("compaction marker not used: {}", marker.reason),
        });
    }
    let mut visible = hour.visible(&markers);
    inventory.ignored += visible.replaced + visible.uncommitted;
    if rollups {
        for marker in &markers {
            if let Some(files) = whole_rollup(storage, hour, marker) {
                let outputs: Vec<String> =
                    marker.outputs.iter().map(|o| hour.key(&o.name)).collect();
                visible.read.retain(|key| !outputs.contains(key));
                inventory.rolled_up += outputs.len();
                inventory.files.extend(files);
            }
        }
    }
    for key in visible.read {
        match storage
            .stat(&key)
            .map_err(|e| e.to_string())
            .and_then(|meta| {
                check_footer(storage, &key, meta.size)?;
                Ok(meta)
            }) {
            Ok(meta) => inventory.files.push(meta),
            Err(error) => {
                tracing::warn!(file = %key, %error, "skipping a file that cannot be read");
                inventory.unreadable.push(Unreadable { key, error });
            }
        }
    }
}

/// The roll-up files of `marker`, each there with the size it names and a sound footer; `None`
/// (logged when it had some) to read its compacted files instead.
fn whole_rollup(
    storage: &dyn LakeStorage,
    hour: &HourFolder,
    marker: &Marker,
) -> Option<Vec<ObjectMeta>> {
    let folder = rollup_folder(&hour.folder)?;
    if marker.rollups.is_empty() {
        return None;
    }
    let checked: Result<Vec<ObjectMeta>, String> = marker
        .rollups
        .iter()
        .map(|rollup| {
            let key = format!("{folder}/{}", rollup.name);
            let meta = storage.stat(&key).map_err(|e| format!("{key}: {e}"))?;
            if meta.size != rollup.size {
                return Err(format!(
                    "{key} holds {} bytes, its marker says {}",
                    meta.size, rollup.size
                ));
            }
            check_footer(storage, &key, meta.size).map_err(|e| format!("{key}: {e}"))?;
            Ok(meta)
        })
        .collect();
    match checked {
        Ok(files) => Some(files),
        Err(error) => {
            tracing::warn!(hour = %hour.folder, %error, "an hourly roll-up cannot be used; its compacted files are read instead");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_files_of_hour_folders_are_tables_files() {
        assert!(in_hour_folder("cuda/dt=2026-11-22/hour=03/part-a.parquet"));
        assert!(!in_hour_folder("cuda/loose.parquet"));
        assert!(!in_hour_folder("cuda/dt=2026-11-22/part-a.parquet"));
        assert!(!in_hour_folder(
            "cuda/dt=2026-11-22/hour=03/deeper/part-a.parquet"
        ));
    }
}
