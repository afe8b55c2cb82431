//! The report's questions to the engine: per-function call statistics folded from the scan as
//! it streams, so a fleet's CUDA calls are counted without being held in memory; only XIDs and
//! failed calls come back as rows. Every scan pays the engine's cost per file and column read
//! (open, footer, a decompressor per column chunk) for every file of the table, which over a
//! fleet's day is most of the time, so the report scans each table as few times as it can and
//! reads only the columns it uses: `cuda_stats` once and `cuda` twice (statistics and hosts,
//! then the failed calls, which the `result` statistics let the scan skip in files without
//! failures), `xid` and `driver` once. A third scan of `cuda` reads the flight recorder's rows,
//! only when the statistics' scan saw some; `cuda_memory` is read once, for the incidents'
//! processes only.
//!
//! Percentiles of single calls are nearest-rank over a histogram per function whose buckets are
//! the durations as the page writes them ([`super::format::duration`], three significant digits,
//! each bucket named by its first duration, [`super::format::duration_bucket`]): the bucket that
//! holds the rank-th call is exactly the one whose label the page would show, so the page is the
//! same as with every duration in memory, and the histogram has a few thousand buckets at most.
//! Aggregated calls add their rows' histograms (functions.rs says which calls count where).
//!
//! The folds over many rows (`cuda`, `cuda_stats`, `cuda_memory`, the failed calls) ask for
//! text as string views ([`crate::engine::Decoding::text_as_views`]): the decoder then points
//! into each page's dictionary instead of copying every row's text.

use std::collections::BTreeSet;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, UInt32Type, UInt64Type};
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::DataType;

use gpuship_model::EventKind;

use super::functions::{CallKey, FunctionStats, Tally};
use super::nearest_memory::NearestMemory;
use crate::engine::QueryError;
use crate::read::LakeRead;
use crate::views::columns::{select_list, CUDA_CALL_COLUMNS, XID_COLUMNS};
use crate::views::cuda_stats::StatsBatch;
use crate::views::rows::{self, CudaCall, MemoryBatch, Xid, MEMORY_COLUMNS, NOT_CAPTURED};

/// Rows the views count as CUDA calls or aggregates (rows::cuda_calls and
/// cuda_stats::cuda_stats leave the others out).
const CALL: &str = "pid IS NOT NULL AND function IS NOT NULL";

/// `cuda` rows recorded as they happened. The others are the flight recorder's copies of calls
/// counted elsewhere (functions.rs), shown only beside their incident; files from before the
/// column read it as null, which is not true.
const AS_THEY_HAPPENED: &str = "flight_recorder IS NOT TRUE";

/// The columns of `cuda_stats` the report's counts read (cuda_stats::CUDA_STATS_COLUMNS less
/// the interval, comm and bytes).
const STATS_COLUMNS: &[&str] = &[
    "time",
    "time_ns",
    "host",
    "pid",
    "function",
    "result",
    "result_name",
    "calls",
    "duration_sum_ns",
    "duration_min_ns",
    "duration_max_ns",
    "duration_buckets",
];

fn entry_only() -> String {
    format!("coalesce(result_name, '') = '{NOT_CAPTURED}'")
}

fn failed() -> String {
    format!("coalesce(result, 0) <> 0 AND NOT ({})", entry_only())
}

/// The failed CUDA calls of the range, oldest first (timelines and incidents need each one),
/// turned into rows batch by batch as the scan makes them.
pub fn failed_calls(read: &mut LakeRead<'_>) -> Result<Vec<CudaCall>, QueryError> {
    calls_where(read, &format!("{} AND {AS_THEY_HAPPENED}", failed()))
}

/// The calls the flight recorder wrote, oldest first. Only asked for when the statistics'
/// scan saw some ([`CudaSummary::flight_recorded`]): files without such rows are then left
/// out by their `flight_recorder` statistics.
pub fn flight_recorded_calls(read: &mut LakeRead<'_>) -> Result<Vec<CudaCall>, QueryError> {
    calls_where(read, "flight_recorder")
}

fn calls_where(read: &mut LakeRead<'_>, condition: &str) -> Result<Vec<CudaCall>, QueryError> {
    let sql = format!(
        "SELECT {} FROM cuda WHERE {CALL} AND {condition}",
        select_list(CUDA_CALL_COLUMNS),
    );
    // Failures are rare: the filter is evaluated while decoding.
    let mut calls = read.fold_selective(EventKind::Cuda, &sql, Vec::new, |calls, batch| {
        calls.extend(rows::cuda_calls(&[batch]));
    })?;
    calls.sort_by_key(|c| (c.time_ns, c.pid, c.tid));
    Ok(calls)
}

/// The XIDs of the range, oldest first, turned into rows batch by batch.
pub fn xids(read: &mut LakeRead<'_>) -> Result<Vec<Xid>, QueryError> {
    let sql = format!("SELECT {} FROM xid", select_list(XID_COLUMNS));
    let mut xids = read.fold(EventKind::Xid, &sql, Vec::new, |xids, batch| {
        xids.extend(rows::xids(&[batch]));
    })?;
    xids.sort_by_key(|x| x.time_ns);
    Ok(xids)
}

/// The `cuda_memory` rows nearest each incident (`nearest` says which incidents and processes),
/// folded from a scan of the rows of those processes' pids.
pub fn memory_held(
    read: &mut LakeRead<'_>,
    nearest: NearestMemory,
) -> Result<NearestMemory, QueryError> {
    let pids: Vec<String> = nearest.pids().iter().map(i32::to_string).collect();
    if pids.is_empty() {
        return Ok(nearest);
    }
    let sql = format!(
        "SELECT {} FROM cuda_memory WHERE pid IN ({})",
        select_list(MEMORY_COLUMNS),
        pids.join(", ")
    );
    // The fold starts from a copy of the incidents' set, as a failed read is retried. Text as
    // views: of tens of millions of rows, only the nearest few are built.
    read.fold_text_views(
        EventKind::CudaMemory,
        &sql,
        || nearest.clone(),
        |nearest, batch| nearest.add_batch(&MemoryBatch::new(&batch)),
    )
}

/// What the report asks of `cuda` and `cuda_stats` in aggregate: statistics per function, most
/// called first, and the hosts that wrote a call.
#[derive(Debug, Default)]
pub struct CudaSummary {
    /// Per function.
    pub functions: Vec<FunctionStats>,
    /// Hosts with at least one call.
    pub hosts: Vec<String>,
    /// Rows the flight recorder wrote: seen, and left out of `functions`.
    pub flight_recorded: u64,
}

/// Adds the non-empty host names of `column` to `hosts`. A batch comes from one file, and a
/// file from one host: each run of one name is looked up once.
fn add_hosts<'a>(hosts: &mut BTreeSet<String>, column: impl IntoIterator<Item = Option<&'a str>>) {
    let mut last: Option<&str> = None;
    for host in column.into_iter().flatten() {
        if last != Some(host) && !host.is_empty() && !hosts.contains(host) {
            hosts.insert(host.to_string());
        }
        last = Some(host);
    }
}

/// A text column as `StringArray` (the engine may hand out string views).
fn utf8(column: &ArrayRef) -> Result<ArrayRef, QueryError> {
    cast_text(column, DataType::Utf8)
}

/// A text column of a [`LakeRead::fold_text_views`] batch as `StringViewArray` (what the engine
/// hands out there; anything else is cast).
fn text_views(column: &ArrayRef) -> Result<ArrayRef, QueryError> {
    cast_text(column, DataType::Utf8View)
}

fn cast_text(column: &ArrayRef, to: DataType) -> Result<ArrayRef, QueryError> {
    if *column.data_type() == to {
        return Ok(Arc::clone(column));
    }
    datafusion::arrow::compute::cast(column, &to)
        .map_err(|err| QueryError::Execution(err.to_string()))
}

/// Adds a batch of `host, function, duration_ns, result, result_name, pid, flight_recorder`
/// rows, text as string views, to `tally`; the flight recorder's are only counted as such.
fn add_calls(tally: &mut Tally, batch: &RecordBatch) -> Result<(), QueryError> {
    let (hosts, functions, names) = (
        text_views(batch.column(0))?,
        text_views(batch.column(1))?,
        text_views(batch.column(4))?,
    );
    let (hosts, functions, names) = (
        hosts.as_string_view(),
        functions.as_string_view(),
        names.as_string_view(),
    );
    let durations = batch.column(2).as_primitive_opt::<UInt64Type>();
    let results = batch.column(3).as_primitive_opt::<UInt32Type>();
    let pids = batch.column(5).as_primitive_opt::<Int32Type>();
    let recorded = batch.column(6).as_boolean_opt();
    add_hosts(&mut tally.hosts, hosts.iter());
    // A batch comes from one file, sorted by host: how a process's calls to a function count
    // is looked up once per host run, not per row. Rows are matched by their raw 16-byte views:
    // two equal views are the same text (the same inline bytes, or the same place in the same
    // buffer), and the views of one dictionary's value are equal, so a row costs a hash of
    // two integers instead of a hash and a comparison of text. Equal texts with different
    // views (plain-encoded pages) only cost another lookup.
    let mut keys: foldhash::HashMap<(u128, i32), CallKey> = Default::default();
    let mut keys_host: Option<u128> = None;
    for row in 0..batch.num_rows() {
        if recorded.is_some_and(|r| r.is_valid(row) && r.value(row)) {
            tally.flight_recorded = tally.flight_recorded.saturating_add(1);
            continue;
        }
        let (true, Some(pid)) = (
            functions.is_valid(row),
            pids.filter(|p| p.is_valid(row)).map(|p| p.value(row)),
        ) else {
            continue;
        };
        let host_view = if hosts.is_valid(row) {
            hosts.views()[row]
        } else {
            0
        };
        let entry_only = names.is_valid(row) && names.value(row) == NOT_CAPTURED;
        let result = results
            .filter(|r| r.is_valid(row))
            .map_or(0, |r| r.value(row));
        // A null duration counts as 0, as in rows::cuda_calls.
        let duration = durations
            .filter(|d| d.is_valid(row))
            .map_or(0, |d| d.value(row));
        if keys_host != Some(host_view) {
            keys.clear();
            keys_host = Some(host_view);
        }
        let function = functions.value(row);
        let key = keys
            .entry((functions.views()[row], pid))
            .or_insert_with(|| {
                // A null host reads as "" (view 0 is the empty text).
                let host = if hosts.is_valid(row) {
                    hosts.value(row)
                } else {
                    ""
                };
                tally.call_key(host, pid, function)
            });
        tally.add_call_as(key, function, duration, result, entry_only);
    }
    Ok(())
}

/// Call statistics per function over a range of `seconds`, and the hosts: one scan of
/// `cuda_stats`, then one of `cuda`, each folded as it streams (a `GROUP BY` per question, or
/// `GROUPING SETS`, took two to four times as long in the engine: docs/performance.md,
/// "Fleet lake"). The aggregates come first: they decide which `cuda` rows they already count
/// (functions.rs).
pub fn cuda_summary(read: &mut LakeRead<'_>, seconds: f64) -> Result<CudaSummary, QueryError> {
    let sql = format!(
        "SELECT {} FROM cuda_stats WHERE {CALL} AND calls IS NOT NULL",
        select_list(STATS_COLUMNS)
    );
    let aggregated = read.fold_text_views(
        EventKind::CudaStats,
        &sql,
        Tally::default,
        |tally, batch| {
            let rows = StatsBatch::new(&batch);
            for row in (0..rows.len()).filter_map(|i| rows.row(i)) {
                tally.add_stats(&row);
            }
        },
    )?;
    tracing::debug!(
        functions = aggregated.functions_seen(),
        "report: cuda_stats folded"
    );
    let mut failure = None;
    let tally = read.fold_text_views(
        EventKind::Cuda,
        &format!(
            "SELECT host, function, duration_ns, result, result_name, pid, flight_recorder \
             FROM cuda WHERE {CALL}"
        ),
        || aggregated.clone(),
        |tally, batch| {
            if let Err(err) = add_calls(tally, &batch) {
                failure.get_or_insert(err);
            }
        },
    )?;
    if let Some(err) = failure {
        return Err(err);
    }
    let hosts = tally.hosts.iter().cloned().collect();
    Ok(CudaSummary {
        flight_recorded: tally.flight_recorded,
        functions: tally.finish(seconds),
        hosts,
    })
}

/// Rows of `table` the views count (`valid`), and the hosts that wrote them, in one scan.
pub fn count_by_host(
    read: &mut LakeRead<'_>,
    table: EventKind,
    valid: &str,
) -> Result<(usize, Vec<String>), QueryError> {
    let mut failure = None;
    let (rows, hosts) = read.fold(
        table,
        &format!("SELECT host FROM {} WHERE {valid}", table.as_str()),
        || (0usize, BTreeSet::new()),
        |(rows, hosts), batch| {
            *rows += batch.num_rows();
            let column = match utf8(batch.column(0)) {
                Ok(column) => column,
                Err(err) => {
                    failure.get_or_insert(err);
                    return;
                }
            };
            add_hosts(hosts, column.as_string::<i32>().iter());
        },
    )?;
    if let Some(err) = failure {
        return Err(err);
    }
    Ok((rows, hosts.into_iter().collect()))
}

/// What rows::driver_ops keeps.
pub const DRIVER_OP: &str = "pid IS NOT NULL";
