//! One run of `gpuship-lake compact` over one hour folder: clean what a killed run left,
//! rewrite the closed hour's new agents' files, commit, and delete replaced files that are due.
//! The order is what makes a kill at any point harmless ([`super`] explains why).

use std::sync::Arc;

use anyhow::Context;
use chrono::{DateTime, Utc};
use futures_util::StreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use tokio::runtime::Runtime;

use super::marker::{marker_name, Marker, FORMAT};
use super::phase::{Pauser, Phase};
use super::plan::{plan_hour, HourPlan, Rules};
use super::rollup::{rollup_folder, ROLLUP_PREFIX};
use super::rule::{load_markers, name_of, HourFolder};
use super::write::{RollupFiles, Writer};
use super::Summary;
use crate::storage::LakeStorage;

/// What a run works with.
pub struct Job<'a> {
    /// The lake, for listing and reading.
    pub storage: &'a dyn LakeStorage,
    /// The same lake, for writing and deleting.
    pub store: Arc<dyn ObjectStore>,
    /// Drives the store's requests.
    pub runtime: Runtime,
    /// The plan's settings.
    pub rules: Rules,
    /// Decoded bytes held for sorting.
    pub sort_memory: usize,
    /// Upload part size.
    pub part_size: usize,
    /// This run's name.
    pub run: String,
    /// When this run started (the closed-hour rule and retiring use it).
    pub now: DateTime<Utc>,
    /// Print the plan only.
    pub dry_run: bool,
    /// The test hook.
    pub pauser: Pauser,
}

impl Job<'_> {
    /// Does this run's work on `hour`, adding what it did to `summary`. Returns the hour's
    /// committed markers, the one this run wrote included.
    pub fn hour(
        &mut self,
        hour: &HourFolder,
        summary: &mut Summary,
    ) -> anyhow::Result<Vec<Marker>> {
        let (markers, damaged) = load_markers(hour, |key| self.storage.get(key));
        if let Some(marker) = damaged.first() {
            // Its compacted files could be all that is left of some rows: nothing here is
            // cleaned or deleted until a person looks.
            anyhow::bail!("{marker}; the hour is left alone (readers read its agents' files)");
        }
        let size_of = |key: &str| self.storage.stat(key).map_or(0, |meta| meta.size);
        let plan = plan_hour(hour, &markers, size_of, &self.rules, self.now);
        if plan.open {
            summary.open_hours += 1;
        }
        if plan.is_empty() {
            return Ok(markers);
        }
        if self.dry_run {
            print_plan(hour, &plan);
            return Ok(markers);
        }
        self.pauser.reached(Phase::Listed);
        // Roll-ups first: a killed run completes its roll-up files after its compacted files,
        // so while a roll-up leftover is there, so is a compacted one, and the hour has work.
        let rollup_debris = self.rollup_debris(hour, &markers)?;
        self.delete(&rollup_debris)?;
        self.delete(&plan.debris)?;
        summary.debris += rollup_debris.len() + plan.debris.len();
        let mut retire = plan.retire.clone();
        let mut markers = markers;
        if !plan.outputs.is_empty() {
            let marker = self.compact(hour, &plan)?;
            markers.push(marker.clone());
            summary.hours += 1;
            summary.sources += marker.sources.len();
            summary.outputs += marker.outputs.len();
            summary.rows += marker.rows;
            // Due by the clock now, not at the run's start (`--retire-after 0s`).
            let due = plan_hour(
                hour,
                std::slice::from_ref(&marker),
                |_| 0,
                &self.rules,
                Utc::now(),
            );
            retire.extend(due.retire);
        }
        for (marker, sources) in &retire {
            self.retire(hour, marker, sources)?;
            summary.retired += sources.len();
        }
        Ok(markers)
    }

    /// The roll-up files of a `cuda_stats` hour that no committed marker names (complete or
    /// not): what a killed run left.
    fn rollup_debris(&self, hour: &HourFolder, markers: &[Marker]) -> anyhow::Result<Vec<String>> {
        let Some(folder) = rollup_folder(&hour.folder) else {
            return Ok(Vec::new());
        };
        let listing = self
            .storage
            .list(&format!("{folder}/"))
            .with_context(|| format!("listing {folder}"))?;
        if let Some(unreadable) = listing.unreadable.first() {
            anyhow::bail!("listing {}: {}", unreadable.key, unreadable.error);
        }
        let named: std::collections::HashSet<&str> = markers
            .iter()
            .flat_map(|m| m.rollups.iter().map(|r| r.name.as_str()))
            .collect();
        Ok(listing
            .keys
            .into_iter()
            .filter(|key| {
                let name = name_of(key);
                key.rsplit_once('/')
                    .is_some_and(|(parent, _)| parent == folder)
                    && name.starts_with(ROLLUP_PREFIX)
                    && !named.contains(name)
            })
            .collect())
    }

    /// Writes the plan's compacted files, then the marker that commits them.
    fn compact(&mut self, hour: &HourFolder, plan: &HourPlan) -> anyhow::Result<Marker> {
        let mut writer = Writer {
            storage: self.storage,
            store: self.store.clone(),
            runtime: &self.runtime,
            sort_memory: self.sort_memory,
            part_size: self.part_size,
            run: self.run.clone(),
            pauser: self.pauser,
            rollup: rollup_folder(&hour.folder).map(RollupFiles::new),
        };
        let mut outputs = Vec::new();
        let mut rows_read = 0;
        let mut next_index = 0;
        for groups in &plan.outputs {
            let (written, rows) = writer.write(hour, groups, &mut next_index)?;
            outputs.extend(written);
            rows_read += rows;
        }
        let rollups = writer.finish_rollups()?;
        let rows: u64 = outputs.iter().map(|o| o.rows).sum();
        anyhow::ensure!(
            rows == rows_read,
            "{}: wrote {rows} rows of the {rows_read} read; not committed",
            hour.folder
        );
        self.pauser.reached(Phase::Written);
        let marker = Marker {
            format: FORMAT,
            run: self.run.clone(),
            committed_at: Utc::now(),
            rows,
            outputs,
            sources: plan
                .sources()
                .map(|(k, _)| name_of(k).to_string())
                .collect(),
            rollups,
        };
        let key = hour.key(&marker_name(&self.run));
        self.runtime
            .block_on(self.store.put(
                &Path::from(key.as_str()),
                PutPayload::from(marker.to_json()),
            ))
            .with_context(|| format!("committing {key}"))?;
        tracing::info!(hour = %hour.folder, sources = marker.sources.len(), outputs = marker.outputs.len(), rows, "committed");
        self.pauser.reached(Phase::Committed);
        Ok(marker)
    }

    /// Deletes `sources`, replaced by `marker`, after checking that its compacted files are
    /// there whole.
    fn retire(
        &mut self,
        hour: &HourFolder,
        marker: &Marker,
        sources: &[String],
    ) -> anyhow::Result<()> {
        for output in &marker.outputs {
            let key = hour.key(&output.name);
            let meta = self.storage.stat(&key).with_context(|| {
                format!("{key}, named by its marker, is missing; its agents' files are kept")
            })?;
            anyhow::ensure!(
                meta.size == output.size,
                "{key} holds {} bytes, its marker says {}; its agents' files are kept",
                meta.size,
                output.size
            );
        }
        if let Some((first, rest)) = sources.split_first() {
            self.delete(std::slice::from_ref(first))?;
            self.pauser.reached(Phase::Retiring);
            self.delete(rest)?;
        }
        Ok(())
    }

    /// Deletes `keys`; one already gone is fine (a run killed while deleting). On a local disk
    /// the files are removed by path: `object_store` cannot name its own staged uploads
    /// (`<name>#<n>`) there.
    fn delete(&self, keys: &[String]) -> anyhow::Result<()> {
        if keys.is_empty() {
            return Ok(());
        }
        if let Some(local) = self.storage.as_local() {
            for key in keys {
                let path = local.path_of(key)?;
                match std::fs::remove_file(&path) {
                    Err(err) if err.kind() != std::io::ErrorKind::NotFound => {
                        return Err(err).with_context(|| format!("deleting {}", path.display()));
                    }
                    _ => {}
                }
            }
            return Ok(());
        }
        let paths: Vec<object_store::Result<Path>> =
            keys.iter().map(|k| Ok(Path::from(k.as_str()))).collect();
        let results: Vec<_> = self.runtime.block_on(
            self.store
                .delete_stream(futures_util::stream::iter(paths).boxed())
                .collect::<Vec<_>>(),
        );
        for result in results {
            match result {
                Ok(_) | Err(object_store::Error::NotFound { .. }) => {}
                Err(err) => return Err(err).context("deleting replaced or leftover files"),
            }
        }
        Ok(())
    }
}

/// `--dry-run`'s lines for one hour.
fn print_plan(hour: &HourFolder, plan: &HourPlan) {
    let folder = &hour.folder;
    if !plan.debris.is_empty() {
        let n = plan.debris.len();
        say(format_args!(
            "{folder}: would delete {n} leftovers of a killed run"
        ));
    }
    if !plan.outputs.is_empty() {
        let (files, bytes) = plan
            .sources()
            .fold((0, 0), |(n, b), (_, size)| (n + 1, b + size));
        let outputs = plan.outputs.len();
        say(format_args!(
            "{folder}: would compact {files} files ({bytes} bytes) into {outputs} compacted \
             file{}",
            if outputs == 1 { "" } else { "s" }
        ));
    }
    for (marker, sources) in &plan.retire {
        let (n, name) = (sources.len(), marker_name(&marker.run));
        say(format_args!(
            "{folder}: would delete {n} files replaced by {name}"
        ));
    }
}

/// Prints a line on standard output; a pipe closed early (`| head`) is not an error.
pub(super) fn say(line: std::fmt::Arguments) {
    use std::io::Write;
    let _ = writeln!(std::io::stdout().lock(), "{line}");
}
