//! One read of the lake: the files of some tables for a time range ([`Inventory`]), the engine
//! over them, and what happens when a file turns out to be damaged only once the engine reads
//! it: every file of the read is then checked alone (decoded; if the query still fails, read
//! by the engine one at a time), the damaged ones are reported with their key and left out, and
//! the query runs again on the rest.

use std::sync::Arc;

use arrow_array::RecordBatch;
use gpuship_sinks::EventKind;

use crate::engine::{Engine, QueryError};
use crate::inventory::{self, Inventory};
use crate::listed_store::ListedStore;
use crate::range::TimeRange;
use crate::storage::{LakeStorage, Unreadable};
use crate::table;

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
    /// Lists `kinds` for `range` in `storage` and registers them as tables.
    pub(crate) fn new(
        storage: &'a dyn LakeStorage,
        kinds: &[EventKind],
        range: TimeRange,
    ) -> anyhow::Result<Self> {
        let mut tables = Vec::with_capacity(kinds.len());
        for &kind in kinds {
            tables.push((kind, inventory::take(storage, kind.as_str(), &range)?));
        }
        let mut read = Self {
            storage,
            range,
            engine: Engine::new()?,
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
        self.engine.reset(store)?;
        for (kind, inventory) in &self.tables {
            self.engine
                .register(*kind, inventory.files.iter().cloned(), &self.range)?;
        }
        Ok(())
    }

    /// The rows `sql` asks for. A failure while reading leads to a check of every file; the
    /// damaged ones join [`unreadable`](Self::unreadable) and the query runs again.
    pub fn query(&mut self, sql: &str) -> Result<Vec<RecordBatch>, QueryError> {
        let error = match self.engine.sql(sql) {
            Err(QueryError::Execution(error)) if !self.screened => error,
            other => return other,
        };
        self.screened = true;
        tracing::warn!(%error, "a read failed; checking each file of the range alone");
        self.screen_decoding();
        self.register().map_err(execution)?;
        match self.engine.sql(sql) {
            Err(QueryError::Execution(error)) => {
                // The engine reads some damage the plain decoder does not see (page indexes,
                // its own metadata checks): ask it, one file at a time.
                tracing::warn!(%error, "a read failed again; checking each file with the engine");
                self.screen_with_engine();
                self.register().map_err(execution)?;
                self.engine.sql(sql)
            }
            other => other,
        }
    }

    /// Decodes every file alone and leaves out those that fail.
    fn screen_decoding(&mut self) {
        let (storage, range) = (self.storage, self.range);
        for (_, inventory) in &mut self.tables {
            let files = std::mem::take(&mut inventory.files);
            for meta in files {
                let key = meta.location.to_string();
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
                    .reset(store)
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
