//! `gpuship-lake compact`: rewrites the agents' many small Parquet files of each closed hour into
//! a few large ones per table, sorted by host and time, on a local folder or an S3-compatible
//! store. One job per lake (a systemd timer or a Kubernetes CronJob that never overlaps
//! itself); the agents keep writing as before and never coordinate with it.
//!
//! Exactly once, whenever it is killed, by the order of its steps in each hour folder:
//!
//! 1. **Clean** ([`plan::HourPlan::debris`]): compacted files no marker names and unfinished
//!    uploads are what a killed run left; no reader reads them, so they are deleted.
//! 2. **Write** ([`write`]): the closed hour's agents' files that no marker names yet are
//!    rewritten into `compact-<run>-<n>.parquet`. Readers skip these files: nothing names them.
//! 3. **Commit**: `_compaction-<run>.json` ([`marker`]) is written in one piece, naming the
//!    compacted files and the agents' files they replace. From then on readers read the former
//!    and skip the latter ([`rule`]).
//! 4. **Retire**: `--retire-after` later (a later run, or the same one), the replaced files
//!    are deleted, after checking the compacted files are there whole. The marker stays: it is
//!    what makes its compacted files visible.
//!
//! Killed before 3, the hour is as it was plus debris (step 1 of the rerun). Killed after 3,
//! the rerun finds the marker and goes on with step 4. Files an agent writes into the hour
//! later are named by no marker: readers read them and the next run compacts them under a new
//! marker. Open hours ([`plan::hour_closed`]), hidden files, other tools' Parquet files and
//! the accounting documents (`_accounting/`) are never touched. A damaged marker stops the
//! job in that hour (reported, exit status 1) until a person looks.
//!
//! One run at a time per lake ([`lock`] on a local disk; the scheduler on S3). After every
//! hour of a kind, the markers its Iceberg table does not hold yet are appended to it as one
//! snapshot ([`crate::iceberg`]): the compacted files are the table's data files; the marker
//! stays what folder readers go by.
//!
//! On a local disk, files and markers appear by rename and are not synced: after a power loss
//! (not a kill) the filesystem decides what survived; `--retire-after` keeps the agents' files
//! long past the kernel's writeback (30 s), so a marker whose files were lost can be deleted by
//! hand and the hour compacted again.

pub mod args;
mod job;
pub mod lock;
pub mod marker;
pub mod phase;
pub mod plan;
pub mod rollup;
pub mod rule;
mod upload;
pub mod write;

use std::process::ExitCode;

use anyhow::Context;
use chrono::Utc;
use gpuship_model::EventKind;

pub use args::CompactArgs;
use job::Job;
use phase::Pauser;
use plan::Rules;
use rule::HourFolder;

/// What a run did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Summary {
    /// Hour folders compacted (a marker committed).
    pub hours: usize,
    /// Agents' files rewritten.
    pub sources: usize,
    /// Compacted files written.
    pub outputs: usize,
    /// Rows rewritten.
    pub rows: u64,
    /// Replaced agents' files deleted.
    pub retired: usize,
    /// Leftovers of killed runs deleted.
    pub debris: usize,
    /// Hour folders still open, left alone.
    pub open_hours: usize,
    /// Hour folders that failed (logged), left as they were or half-way in a safe state.
    pub failed: usize,
    /// Compacted files added to the Iceberg tables.
    pub iceberg_files: usize,
    /// Rows of those files.
    pub iceberg_rows: u64,
    /// Iceberg tables whose commit failed (logged); the next run adds their files.
    pub iceberg_failed: usize,
    /// Tables registered in the REST catalog.
    pub catalog_registered: usize,
    /// Tables whose catalog entry got a commit.
    pub catalog_committed: usize,
    /// Tables whose catalog entry was in step already.
    pub catalog_in_step: usize,
    /// Tables whose catalog entry is still behind (logged); the next run brings it up.
    pub catalog_failed: usize,
}

/// The REST catalog `args` name, if any (checked, not called yet).
fn rest_catalog(args: &CompactArgs) -> anyhow::Result<Option<crate::iceberg::rest::RestCatalog>> {
    let Some(uri) = args.catalog_uri.as_deref().filter(|u| !u.is_empty()) else {
        return Ok(None);
    };
    anyhow::ensure!(
        !args.no_iceberg,
        "--catalog-uri keeps the Iceberg tables' entries in step, and --no-iceberg writes no tables"
    );
    let config = crate::iceberg::rest::CatalogConfig {
        uri: uri.to_string(),
        namespace: args.catalog_namespace.clone(),
        warehouse: args.catalog_warehouse.clone(),
        token: std::env::var("GPUSHIP_CATALOG_TOKEN")
            .ok()
            .filter(|t| !t.is_empty()),
    };
    crate::iceberg::rest::RestCatalog::new(&config)
        .map(Some)
        .context("--catalog-uri")
}

/// Runs `gpuship-lake compact`: exit status 0 when every hour was done, 1 when one failed
/// (each failure is printed; the others are done).
pub fn compact(args: &CompactArgs) -> anyhow::Result<ExitCode> {
    let storage = crate::open_storage(&args.data)?;
    let _lock = match storage.as_local() {
        Some(local) if !args.dry_run => Some(lock::lock(local)?),
        _ => None,
    };
    let now = Utc::now();
    let since = args
        .since
        .as_deref()
        .map(|since| crate::range::TimeRange::parse(since, None, now))
        .transpose()
        .context("--since")?;
    let catalog = rest_catalog(args)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let mut job = Job {
        storage: storage.as_ref(),
        store: storage.object_store(),
        runtime,
        rules: Rules {
            grace: args.grace,
            retire_after: args.retire_after,
            target_file_size: args.target_file_size,
        },
        sort_memory: usize::try_from(args.sort_memory).unwrap_or(usize::MAX),
        part_size: usize::try_from(args.upload_part_bytes).unwrap_or(usize::MAX),
        run: marker::run_name(now),
        now,
        dry_run: args.dry_run,
        pauser: Pauser::from_env().map_err(anyhow::Error::msg)?,
    };
    let mut summary = Summary::default();
    for kind in EventKind::all() {
        // The committed markers of every hour listed, for the kind's Iceberg table.
        let mut committed: Vec<(HourFolder, marker::Marker)> = Vec::new();
        // An hour that failed here may hold markers the table lacks: a later run adds them.
        let prefixes = match &since {
            Some(range) => crate::partition::prefixes(kind.as_str(), range),
            None => vec![format!("{kind}/")],
        };
        for prefix in prefixes {
            let listing = storage
                .list(&prefix)
                .with_context(|| format!("listing {prefix} in {}", storage.describe()))?;
            for folder in &listing.unreadable {
                eprintln!("gpuship-lake compact: {}: {}", folder.key, folder.error);
                summary.failed += 1;
            }
            // A day's listing holds the hours before `--since` too.
            let wanted = |hour: &HourFolder| {
                since.as_ref().is_none_or(|range| {
                    crate::partition::may_overlap(&format!("{}/", hour.folder), range)
                })
            };
            for hour in hour_folders(listing.keys).into_iter().filter(wanted) {
                match job.hour(&hour, &mut summary) {
                    Ok(markers) => {
                        committed.extend(markers.into_iter().map(|m| (hour.clone(), m)));
                    }
                    Err(err) => {
                        eprintln!("gpuship-lake compact: {}: {err:#}", hour.folder);
                        summary.failed += 1;
                    }
                }
            }
        }
        if args.dry_run || args.no_iceberg {
            continue;
        }
        let table = crate::iceberg::Table {
            storage: storage.as_ref(),
            store: storage.object_store(),
            runtime: &job.runtime,
            kind,
            merge_manifests_at: args.merge_manifests_at,
            keep_snapshots: args.keep_snapshots,
            catalog: catalog.as_ref(),
        };
        match crate::iceberg::commit_markers(&table, &committed, job.pauser) {
            Ok(appended) => {
                summary.iceberg_files += appended.files;
                summary.iceberg_rows += appended.rows;
                match appended.catalog {
                    None => {}
                    Some(Ok(crate::iceberg::sync::Synced::Registered)) => {
                        summary.catalog_registered += 1
                    }
                    Some(Ok(crate::iceberg::sync::Synced::Committed(_))) => {
                        summary.catalog_committed += 1
                    }
                    Some(Ok(crate::iceberg::sync::Synced::InStep)) => summary.catalog_in_step += 1,
                    Some(Err(err)) => {
                        eprintln!("gpuship-lake compact: {err}");
                        summary.catalog_failed += 1;
                    }
                }
            }
            Err(err) => {
                eprintln!(
                    "gpuship-lake compact: {}: {err:#}",
                    crate::iceberg::table_folder(kind)
                );
                summary.iceberg_failed += 1;
            }
        }
    }
    if !args.dry_run {
        job::say(format_args!(
            "compacted {} hours: {} files into {} ({} rows); deleted {} replaced files and {} \
             leftovers; {} hours still open; {} failed",
            summary.hours,
            summary.sources,
            summary.outputs,
            summary.rows,
            summary.retired,
            summary.debris,
            summary.open_hours,
            summary.failed
        ));
        if !args.no_iceberg {
            job::say(format_args!(
                "iceberg: {} files ({} rows) added; {} tables failed",
                summary.iceberg_files, summary.iceberg_rows, summary.iceberg_failed
            ));
        }
        if let Some(catalog) = &catalog {
            job::say(format_args!(
                "catalog {} ({}): {} tables registered, {} brought up to date, {} in step; {} \
                 behind",
                catalog.uri(),
                catalog.namespace(),
                summary.catalog_registered,
                summary.catalog_committed,
                summary.catalog_in_step,
                summary.catalog_failed
            ));
        }
    }
    Ok(
        if summary.failed == 0 && summary.iceberg_failed == 0 && summary.catalog_failed == 0 {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        },
    )
}

/// `keys` (sorted) by hour folder; keys outside `<table>/dt=.../hour=.../` are not the job's.
fn hour_folders(keys: Vec<String>) -> Vec<HourFolder> {
    let mut folders: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for key in keys {
        if let Some((folder, _)) = key.rsplit_once('/') {
            if crate::inventory::in_hour_folder(&key) {
                folders.entry(folder.to_string()).or_default().push(key);
            }
        }
    }
    folders
        .into_iter()
        .map(|(folder, keys)| HourFolder::classify(&folder, keys))
        .collect()
}
