//! The query engine over the lake: DataFusion, reading the Parquet files through
//! `object_store`. Each event kind is a table (`xid`, `cuda`, `driver`) over its hive folders
//! (`<kind>/dt=YYYY-MM-DD/hour=HH/`, partition columns `dt` and `hour`), seen through a view
//! that keeps the rows of the time range: the range prunes partitions by `dt`/`hour` and is
//! pushed down to the Parquet scan (row groups and pages by their `time` statistics), only the
//! columns a query names are decoded, and files are scanned in parallel.
//!
//! Which files a table holds is decided before the engine sees them ([`crate::inventory`]);
//! the engine reads only those ([`LakeTable`]), through a read-only [`ListedStore`].

use std::future::Future;
use std::num::NonZeroUsize;
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use datafusion::config::TableParquetOptions;
use datafusion::error::DataFusionError;
use datafusion::execution::memory_pool::{
    GreedyMemoryPool, MemoryConsumer, MemoryPool, TrackConsumersPool,
};
use datafusion::execution::object_store::ObjectStoreUrl;
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::logical_expr::{col, lit, Expr};
use datafusion::prelude::{SQLOptions, SessionConfig, SessionContext};
use datafusion::scalar::ScalarValue;
use futures_util::StreamExt;
use gpuship_model::EventKind;
use object_store::ObjectMeta;

use crate::lake_table::LakeTable;
use crate::limits::{human, Limits, LIMIT_REACHED};
use crate::listed_store::ListedStore;
use crate::local::LocalStorage;
use crate::range::TimeRange;

/// The URL the lake's store is registered under; table paths are below it.
const LAKE_URL: &str = "gpuship-lake://lake/";

/// Scans of a local folder run in this many partitions whatever the core count: enough to
/// overlap reads with decoding, few enough to bound the decoders held at once
/// (docs/performance.md, "Fleet lake").
const SCAN_PARTITIONS: usize = 4;

/// Scans of a bucket run in this many partitions: each waits for a request most of the time
/// (a GET per small file, tens of milliseconds against S3), so requests in flight, not cores,
/// set the pace; each partition holds one small file at a time.
const REMOTE_SCAN_PARTITIONS: usize = 16;

/// Why a query gave no rows.
#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    /// The SQL does not parse or does not fit the tables (the user's to fix).
    #[error("{0}")]
    Sql(DataFusionError),
    /// Reading failed (a file, the store).
    #[error("{0}")]
    Execution(String),
    /// The query needed more memory than `--memory-limit` or more time than `--timeout`
    /// ([`crate::limits`]); the message starts with what was reached.
    #[error("{0}")]
    Limit(String),
}

/// A DataFusion session with the lake's tables for one range.
pub struct Engine {
    ctx: SessionContext,
    runtime: tokio::runtime::Runtime,
    /// The lake's folder when it is local: small files are read from it in place.
    local: Option<LocalStorage>,
    limits: Limits,
    /// When `limits.timeout` has passed since the engine was made.
    deadline: tokio::time::Instant,
    /// How tables registered from now on are decoded ([`Engine::decode`]).
    decoding: Decoding,
}

/// How the Parquet decoder of a table's scans works, for scans that pay for it; the default
/// suits every query.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Decoding {
    /// Evaluate a query's filter inside the decoder (DataFusion's `pushdown_filters`): the
    /// filter's columns first, the others only for the rows it keeps. It pays for a filter
    /// that keeps few rows of large row groups (the failed calls of a compacted hour: 25 to 40%
    /// less time for that scan); for the other scans it was slower and held twice the memory
    /// (docs/performance.md, "Fleet lake").
    pub filter_while_decoding: bool,
    /// Text columns as string views (`Utf8View`) instead of `Utf8`: a value is a 16-byte view
    /// into the page's dictionary (or holds text up to 12 bytes itself) instead of a copy, so a
    /// fold that reads a few text columns of a hundred million rows decodes them without
    /// copying a byte of text. The steps of such a fold read `StringViewArray`s.
    pub text_as_views: bool,
}

/// `schema` with its top-level `Utf8` columns as `Utf8View`.
fn with_text_views(schema: SchemaRef) -> SchemaRef {
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|f| match f.data_type() {
            DataType::Utf8 => f.as_ref().clone().with_data_type(DataType::Utf8View),
            _ => f.as_ref().clone(),
        })
        .collect();
    Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()))
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine").finish_non_exhaustive()
    }
}

/// A table's columns as the engine sees them: the kind's schema with every column nullable,
/// so files of older schema versions (missing columns) read as nulls instead of failing.
fn table_schema(kind: EventKind) -> SchemaRef {
    let schema = kind_schema(kind);
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|f| f.as_ref().clone().with_nullable(true))
        .collect();
    Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()))
}

/// The kind's schema as the sinks define it. It comes as Arrow IPC bytes (gpuship-model's copy,
/// which a sinks test keeps equal to their schemas) because the sinks may be built on a newer
/// arrow than the engine's; the columns, types and metadata are the same.
pub fn kind_schema(kind: EventKind) -> SchemaRef {
    let bytes = gpuship_model::schemas::schema_ipc(kind);
    match arrow_ipc::reader::StreamReader::try_new(bytes, None) {
        Ok(reader) => reader.schema(),
        // Both sides are Arrow's IPC format, which is versioned and stable across releases;
        // the unit test below reads every kind.
        Err(err) => unreachable!("the {kind} schema from gpuship-model is not readable: {err}"),
    }
}

/// `time` in `[since, until)`, and the `dt`/`hour` partitions that can hold such rows.
fn range_filter(range: &TimeRange) -> Expr {
    let micros = |v: i64| {
        lit(ScalarValue::TimestampMicrosecond(
            Some(v),
            Some("UTC".into()),
        ))
    };
    let time = col("time")
        .gt_eq(micros(range.since_micros()))
        .and(col("time").lt(micros(range.until_micros())));
    // `until` is exclusive: an end on the hour does not need that hour's folder.
    let last = range.until() - chrono::Duration::microseconds(1);
    let (first_dt, first_hour) = partition_of(range.since());
    let (last_dt, last_hour) = partition_of(last);
    let from = col("dt").gt(lit(first_dt.clone())).or(col("dt")
        .eq(lit(first_dt))
        .and(col("hour").gt_eq(lit(first_hour))));
    let to = col("dt").lt(lit(last_dt.clone())).or(col("dt")
        .eq(lit(last_dt))
        .and(col("hour").lt_eq(lit(last_hour))));
    time.and(from).and(to)
}

/// The `dt=` and `hour=` values of the folder holding `at`.
fn partition_of(at: chrono::DateTime<chrono::Utc>) -> (String, String) {
    (
        at.format("%Y-%m-%d").to_string(),
        at.format("%H").to_string(),
    )
}

impl Engine {
    /// A session with the default [`Limits`], scanning with every core.
    pub fn new() -> anyhow::Result<Self> {
        Self::with_limits(Limits::default())
    }

    /// A session whose memory pool holds `limits.memory` and whose queries stop when
    /// `limits.timeout` has passed from now, scanning with every core.
    pub fn with_limits(limits: Limits) -> anyhow::Result<Self> {
        // Small local files are read on the scan's own thread (whole_file.rs): a thread per
        // scan partition keeps every core busy while some of them wait for a disk.
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(cores.max(SCAN_PARTITIONS))
            .enable_all()
            .thread_name("gpuship-lake")
            .build()?;
        let deadline = runtime.block_on(async { tokio::time::Instant::now() + limits.timeout });
        Ok(Self {
            ctx: new_context(SCAN_PARTITIONS, &limits)?,
            runtime,
            local: None,
            limits,
            deadline,
            decoding: Decoding::default(),
        })
    }

    /// How tables registered from now on are decoded.
    pub fn decode(&mut self, decoding: Decoding) {
        self.decoding = decoding;
    }

    /// Starts a new session over `store`, with no tables yet; `local` is the same lake as a
    /// local folder, when it is one. A new session each time: the engine caches footers per
    /// session, and files may have been dropped since the last one.
    pub fn reset(
        &mut self,
        store: Arc<ListedStore>,
        local: Option<LocalStorage>,
    ) -> Result<(), DataFusionError> {
        let partitions = if local.is_some() {
            SCAN_PARTITIONS
        } else {
            REMOTE_SCAN_PARTITIONS
        };
        self.ctx = new_context(partitions, &self.limits)?;
        self.local = local;
        let url = ObjectStoreUrl::parse(LAKE_URL)?;
        self.ctx.register_object_store(url.as_ref(), store);
        Ok(())
    }

    /// Makes `files` (keys of `kind`'s hive folders) the table `kind` of this session, rows of
    /// `range` only. Registered again, it replaces the table.
    pub fn register(
        &mut self,
        kind: EventKind,
        files: impl IntoIterator<Item = ObjectMeta>,
        range: &TimeRange,
    ) -> Result<(), DataFusionError> {
        let mut options = TableParquetOptions::default();
        options.global = self.ctx.copied_config().options().execution.parquet.clone();
        if self.decoding.filter_while_decoding {
            options.global.pushdown_filters = true;
            options.global.reorder_filters = true;
        }
        let schema = if self.decoding.text_as_views {
            with_text_views(table_schema(kind))
        } else {
            table_schema(kind)
        };
        let table = LakeTable::new(
            ObjectStoreUrl::parse(LAKE_URL)?,
            schema,
            options,
            self.local.clone(),
            files,
        );
        let view = self
            .ctx
            .read_table(Arc::new(table))?
            .filter(range_filter(range))?
            .into_view();
        self.ctx.deregister_table(kind.as_str())?;
        self.ctx.register_table(kind.as_str(), view)?;
        Ok(())
    }

    /// The rows of `sql`, which may only read: `CREATE`, `COPY`, `INSERT`, `SET` and the like
    /// are refused as SQL errors, so no query writes a file or changes the session. Errors in
    /// the SQL are [`QueryError::Sql`]; everything that fails while reading (a damaged file, a
    /// panic in a decoder) is [`QueryError::Execution`].
    /// The answer is held in the memory pool: one larger than `--memory-limit` is a
    /// [`QueryError::Limit`].
    pub fn sql(&self, sql: &str) -> Result<Vec<RecordBatch>, QueryError> {
        let mut batches = Vec::new();
        let held =
            MemoryConsumer::new("the query's answer").register(&self.ctx.runtime_env().memory_pool);
        self.try_for_each_batch(sql, |batch| {
            held.try_grow(batch.get_array_memory_size())?;
            batches.push(batch);
            Ok(())
        })?;
        Ok(batches)
    }

    /// Hands each batch of `sql`'s answer to `each` as the scan makes it, so an answer of any
    /// size is folded in bounded memory; otherwise as [`Engine::sql`]. After an error `each`
    /// has seen part of the answer: the caller starts over.
    pub fn for_each_batch(
        &self,
        sql: &str,
        mut each: impl FnMut(RecordBatch),
    ) -> Result<(), QueryError> {
        self.try_for_each_batch(sql, |batch| {
            each(batch);
            Ok(())
        })
    }

    /// [`Engine::for_each_batch`] with an `each` that may stop the query.
    fn try_for_each_batch(
        &self,
        sql: &str,
        mut each: impl FnMut(RecordBatch) -> Result<(), DataFusionError>,
    ) -> Result<(), QueryError> {
        let read_only = SQLOptions::new()
            .with_allow_ddl(false)
            .with_allow_dml(false)
            .with_allow_statements(false);
        // Planning can read files too (footers); what fails there is not always the SQL.
        let frame = self.in_time(self.ctx.sql_with_options(sql, read_only))?;
        // The Parquet decoder panics on some damaged files instead of failing; that panic
        // comes back here through the task that ran it.
        let streamed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.in_time(async {
                let mut stream = frame.execute_stream().await?;
                while let Some(batch) = stream.next().await {
                    each(batch?)?;
                }
                Ok::<(), DataFusionError>(())
            })
        }));
        match streamed {
            Ok(result) => result,
            Err(_) => Err(QueryError::Execution(
                "the Parquet decoder failed on a damaged file".into(),
            )),
        }
    }
}

impl Engine {
    /// `work` run to its end on the engine's runtime, unless the deadline comes first; its
    /// errors classified.
    fn in_time<T>(
        &self,
        work: impl Future<Output = Result<T, DataFusionError>>,
    ) -> Result<T, QueryError> {
        match self
            .runtime
            .block_on(async { tokio::time::timeout_at(self.deadline, work).await })
        {
            Ok(result) => result.map_err(|err| classify(err, &self.limits)),
            Err(_) => Err(QueryError::Limit(format!(
                "time {LIMIT_REACHED}: stopped after --timeout {} (the query did not finish; \
                 narrow it, or raise --timeout)",
                humantime::format_duration(self.limits.timeout)
            ))),
        }
    }
}

/// A session with the lake's settings, scanning in `partitions`, and no tables yet. Its memory
/// pool holds `limits.memory`; `repeat`, `lpad` and `rpad` are checked against it.
fn new_context(partitions: usize, limits: &Limits) -> Result<SessionContext, DataFusionError> {
    let pool: Arc<dyn MemoryPool> = Arc::new(TrackConsumersPool::new(
        GreedyMemoryPool::new(limits.memory),
        NonZeroUsize::new(3).unwrap_or(NonZeroUsize::MIN),
    ));
    let env = RuntimeEnvBuilder::new()
        .with_memory_pool(Arc::clone(&pool))
        .build_arc()?;
    let mut config = SessionConfig::new().with_information_schema(true);
    // Footers are read once, by the scan; statistics would read every one while planning.
    config.options_mut().execution.collect_statistics = false;
    // Filters prune row groups and pages by their statistics. Filtering rows inside the
    // decoder as well (`pushdown_filters`) is only for selective scans
    // (`Decoding::filter_while_decoding`).
    // A lake is many small files (one host-hour of one kind each, tens of KiB): per-file cost
    // dominates, not rows. Page indexes only pay for large row groups, and reading them costs
    // a request and a decode per file.
    config.options_mut().execution.parquet.enable_page_index = false;
    config.options_mut().execution.target_partitions = partitions;
    let ctx = SessionContext::new_with_config_rt(config, env);
    for function in crate::bounded_udf::functions(&pool, limits.memory) {
        ctx.register_udf(function);
    }
    Ok(ctx)
}

/// The user's error (SQL that does not parse, names what does not exist, or asks what the
/// engine cannot do) or a failure to read.
fn classify(err: DataFusionError, limits: &Limits) -> QueryError {
    match err.find_root() {
        DataFusionError::ResourcesExhausted(message) if message.contains(LIMIT_REACHED) => {
            QueryError::Limit(message.clone())
        }
        DataFusionError::ResourcesExhausted(message) => QueryError::Limit(format!(
            "memory {LIMIT_REACHED}: the query needs more than --memory-limit {} ({message}); \
             narrow it (--since/--until, fewer columns, a LIMIT), or raise --memory-limit",
            human(limits.memory)
        )),
        DataFusionError::SQL(..)
        | DataFusionError::Plan(_)
        | DataFusionError::SchemaError(..)
        | DataFusionError::NotImplemented(_) => QueryError::Sql(err),
        _ => QueryError::Execution(err.to_string()),
    }
}

#[cfg(test)]
mod tests;
