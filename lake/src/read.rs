//! One read of the lake: the files of some tables for a time range ([`Inventory`]), the engine
//! over them, and what happens when a file turns out to be damaged only once the engine reads
//! it: every file of the read is then checked alone (decoded; if the query still fails, read
//! by the engine one at a time), the damaged ones are reported with their key and left out, and
//! the query runs again on the rest.

use std::sync::Arc;

use arrow_array::RecordBatch;
use gpuship_model::EventKind;
use object_store::ObjectMeta;

use crate::engine::{Decoding, Engine, QueryError};
use crate::inventory::{self, Inventory};
use crate::limits::Limits;
use crate::listed_store::ListedStore;
use crate::range::TimeRange;
use crate::storage::{LakeStorage, Unreadable};
use crate::table;

/// Files a [`fold`](LakeRead::fold) hands the engine per plan. The engine keeps about 25
/// metrics per file it opened (counters and timers, each labelled with the file's name) until
/// its plan ends: a few KiB a file, over 100 MiB for one table of a fleet's day (24,000 files)
/// in one plan. Planning again every 2,000 files costs a few milliseconds each.
pub const FILES_PER_PLAN: usize = 2_000;

/// The largest file [`LakeRead`]'s check decodes whole in memory.
const SCREEN_WHOLE_LIMIT: u64 = 64 << 20;

fn execution(err: anyhow::Error) -> QueryError {
    QueryError::Execution(format!("{err:#}"))
}

/// Leaves `key` out of `inventory`, reported with `error`.
fn skip(inventory: &mut Inventory, key: String, error: String) {
    tracing::warn!(file = %key, %error, "skipping a file that cannot be read");
    inventory.unreadable.push(Unreadable { key, error });
}

/// The tables of a range, ready for queries.
pub struct LakeRead<'a> {
    storage: &'a dyn LakeStorage,
    range: TimeRange,
    engine: Engine,
    tables: Vec<(EventKind, Inventory)>,
    /// Every file was checked alone after a failed query; no second check.
    screened: bool,
}

impl std::fmt::Debug for LakeRead<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LakeRead")
            .field("location", &self.storage.describe())
            .field("range", &self.range)
            .field("files", &self.files_read())
            .finish_non_exhaustive()
    }
}

impl<'a> LakeRead<'a> {
    /// Lists `kinds` for `range` in `storage` and registers them as tables: from the Iceberg
    /// tables' current snapshots, or from the folders, `cuda_stats` from its hourly roll-up
    /// where it has one with `rollups` ([`inventory::take_rolled_up`]).
    pub(crate) fn new(
        storage: &'a dyn LakeStorage,
        kinds: &[EventKind],
        range: TimeRange,
        limits: Limits,
        (from_iceberg, rollups): (bool, bool),
    ) -> anyhow::Result<Self> {
        let mut tables = Vec::with_capacity(kinds.len());
        for &kind in kinds {
            let inventory = if from_iceberg {
                inventory::take_iceberg(storage, kind, &range)?
            } else if rollups && kind == EventKind::CudaStats {
                inventory::take_rolled_up(storage, &range)?
            } else {
                inventory::take(storage, kind.as_str(), &range)?
            };
            tables.push((kind, inventory));
        }
        let mut read = Self {
            storage,
            range,
            engine: Engine::with_limits(limits)?,
            tables,
            screened: false,
        };
        read.register()?;
        Ok(read)
    }

    fn register(&mut self) -> anyhow::Result<()> {
        let files = self
            .tables
            .iter()
            .flat_map(|(_, inventory)| inventory.files.iter().cloned());
        let store = Arc::new(ListedStore::new(self.storage.object_store(), files));
        self.engine.reset(store, self.storage.as_local().cloned())?;
        for (kind, inventory) in &self.tables {
            self.engine
                .register(*kind, inventory.files.iter().cloned(), &self.range)?;
        }
        Ok(())
    }

    /// The rows `sql` asks for. A failure while reading leads to a check of every file; the
    /// damaged ones join [`unreadable`](Self::unreadable) and the query runs again.
    pub fn query(&mut self, sql: &str) -> Result<Vec<RecordBatch>, QueryError> {
        self.screened_run(|engine, _| engine.sql(sql))
    }

    /// `sql`'s answer over `table` folded batch by batch into what `start` makes, by `step`, in
    /// bounded memory however many rows and files the table has. `sql` must treat each row on
    /// its own (a projection and a filter: no aggregate, order, limit or join), because it runs
    /// over [`FILES_PER_PLAN`] files of `table` at a time. Damaged files are handled as by
    /// [`query`](Self::query); the fold then starts over from `start()`.
    pub fn fold<A>(
        &mut self,
        table: EventKind,
        sql: &str,
        start: impl Fn() -> A,
        step: impl FnMut(&mut A, RecordBatch),
    ) -> Result<A, QueryError> {
        self.fold_with(FILES_PER_PLAN, Decoding::default(), table, sql, start, step)
    }

    /// [`fold`](Self::fold) for a filter that keeps few rows: the engine evaluates it while
    /// decoding ([`Decoding::filter_while_decoding`]), so the other columns are decoded only for
    /// the rows it keeps, and text columns come as string views (as in
    /// [`fold_text_views`](Self::fold_text_views)).
    pub fn fold_selective<A>(
        &mut self,
        table: EventKind,
        sql: &str,
        start: impl Fn() -> A,
        step: impl FnMut(&mut A, RecordBatch),
    ) -> Result<A, QueryError> {
        let decoding = Decoding {
            filter_while_decoding: true,
            text_as_views: true,
        };
        self.fold_with(FILES_PER_PLAN, decoding, table, sql, start, step)
    }

    /// [`fold`](Self::fold) with the table's text columns as string views
    /// ([`Decoding::text_as_views`]): `step` gets `StringViewArray`s, not `StringArray`s.
    pub fn fold_text_views<A>(
        &mut self,
        table: EventKind,
        sql: &str,
        start: impl Fn() -> A,
        step: impl FnMut(&mut A, RecordBatch),
    ) -> Result<A, QueryError> {
        let decoding = Decoding {
            text_as_views: true,
            ..Decoding::default()
        };
        self.fold_with(FILES_PER_PLAN, decoding, table, sql, start, step)
    }

    /// The fold, over `files_per_plan` files per plan, decoded as `decoding` says.
    pub(crate) fn fold_with<A>(
        &mut self,
        files_per_plan: usize,
        decoding: Decoding,
        table: EventKind,
        sql: &str,
        start: impl Fn() -> A,
        mut step: impl FnMut(&mut A, RecordBatch),
    ) -> Result<A, QueryError> {
        let range = self.range;
        self.screened_run(|engine, tables| {
            let files = tables
                .iter()
                .find(|(kind, _)| *kind == table)
                .map_or(&[][..], |(_, inventory)| &inventory.files[..]);
            let register = |engine: &mut Engine, files: &[ObjectMeta]| {
                engine
                    .register(table, files.iter().cloned(), &range)
                    .map_err(|err| QueryError::Execution(err.to_string()))
            };
            let mut folded = start();
            engine.decode(decoding);
            let mut scan = || -> Result<(), QueryError> {
                for plan in files.chunks(files_per_plan.max(1)) {
                    register(engine, plan)?;
                    engine.for_each_batch(sql, |batch| step(&mut folded, batch))?;
                }
                Ok(())
            };
            let scanned = scan();
            // The table again with all its files, as other queries read it.
            engine.decode(Decoding::default());
            register(engine, files)?;
            scanned.map(|()| folded)
        })
    }

    /// Every row of `table` in the range, every column, as the engine's batches (planned
    /// [`FILES_PER_PLAN`] files at a time, like [`fold`](Self::fold)).
    pub fn rows(&mut self, table: EventKind) -> Result<Vec<RecordBatch>, QueryError> {
        let sql = format!("SELECT * FROM {}", table.as_str());
        self.fold(table, &sql, Vec::new, |batches, batch| batches.push(batch))
    }

    /// `run`, and after a failure while reading, the files checked and `run` again.
    fn screened_run<T>(
        &mut self,
        mut run: impl FnMut(&mut Engine, &[(EventKind, Inventory)]) -> Result<T, QueryError>,
    ) -> Result<T, QueryError> {
        let error = match run(&mut self.engine, &self.tables) {
            Err(QueryError::Execution(error)) if !self.screened => error,
            other => return other,
        };
        self.screened = true;
        tracing::warn!(%error, "a read failed; checking each file of the range alone");
        self.screen_decoding();
        self.register().map_err(execution)?;
        match run(&mut self.engine, &self.tables) {
            Err(QueryError::Execution(error)) => {
                // The engine reads some damage the plain decoder does not see (page indexes,
                // its own metadata checks): ask it, one file at a time.
                tracing::warn!(%error, "a read failed again; checking each file with the engine");
                self.screen_with_engine();
                self.register().map_err(execution)?;
                run(&mut self.engine, &self.tables)
            }
            other => other,
        }
    }

    /// Decodes every file alone and leaves out those that fail. A file larger than
    /// [`SCREEN_WHOLE_LIMIT`] is not read whole into memory for this: it is kept, and the
    /// engine's check (bounded by its memory pool) judges it if the query fails again.
    fn screen_decoding(&mut self) {
        let (storage, range) = (self.storage, self.range);
        for (_, inventory) in &mut self.tables {
            let files = std::mem::take(&mut inventory.files);
            for meta in files {
                let key = meta.location.to_string();
                if meta.size > SCREEN_WHOLE_LIMIT {
                    inventory.files.push(meta);
                    continue;
                }
                let checked = storage
                    .get(&key)
                    .map_err(|e| e.to_string())
                    .and_then(|data| table::read_rows(data, &range).map_err(|e| e.to_string()));
                match checked {
                    Ok(_) => inventory.files.push(meta),
                    Err(error) => skip(inventory, key, error),
                }
            }
        }
    }

    /// Reads every file alone with the engine and leaves out those that fail.
    fn screen_with_engine(&mut self) {
        for (kind, inventory) in &mut self.tables {
            let files = std::mem::take(&mut inventory.files);
            for meta in files {
                let key = meta.location.to_string();
                let store = Arc::new(ListedStore::new(
                    self.storage.object_store(),
                    [meta.clone()],
                ));
                let checked = self
                    .engine
                    .reset(store, self.storage.as_local().cloned())
                    .and_then(|()| self.engine.register(*kind, [meta.clone()], &self.range))
                    .map_err(|e| e.to_string())
                    .and_then(|()| {
                        self.engine
                            .sql(&format!("SELECT * FROM {kind}"))
                            .map_err(|e| e.to_string())
                    });
                match checked {
                    Ok(_) => inventory.files.push(meta),
                    Err(error) => skip(inventory, key, error),
                }
            }
        }
    }

    /// What was listed for `kind`, if it is one of this read's tables.
    pub fn inventory(&self, kind: EventKind) -> Option<&Inventory> {
        self.tables
            .iter()
            .find(|(k, _)| *k == kind)
            .map(|(_, inventory)| inventory)
    }

    /// Files read, all tables.
    pub fn files_read(&self) -> usize {
        self.tables.iter().map(|(_, i)| i.files.len()).sum()
    }

    /// Files and folders skipped, all tables, in the order the tables were given.
    pub fn unreadable(&self) -> Vec<Unreadable> {
        self.tables
            .iter()
            .flat_map(|(_, i)| i.unreadable.iter().cloned())
            .collect()
    }

    /// The range the tables hold.
    pub fn range(&self) -> TimeRange {
        self.range
    }
}
