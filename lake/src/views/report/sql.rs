//! The report's questions to the engine: per-function call statistics folded from the scan as
//! it streams, so a fleet's CUDA calls are counted without being held in memory; only XIDs and
//! failed calls come back as rows. Every scan pays the engine's cost per file and column read
//! (open, footer, a decompressor per column chunk) for every file of the table, which over a
//! fleet's day is most of the time, so the report scans each table as few times as it can and
//! reads only the columns it uses: `cuda` twice (statistics and hosts, then the failed calls,
//! which the `result` statistics let the scan skip in files without failures), `xid` and
//! `driver` once.
//!
//! Percentiles are nearest-rank over a histogram per function whose buckets are the durations
//! as the page writes them ([`format::duration`], three significant digits, each bucket named
//! by its first duration, [`format::duration_bucket`]): the bucket that holds the rank-th call
//! is exactly the one whose label the page would show, so the page is the same as with every
//! duration in memory, and the histogram has a few thousand buckets at most.

use std::collections::BTreeSet;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{UInt32Type, UInt64Type};
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::DataType;

use gpuship_sinks::EventKind;

use super::format;
use super::functions::{percentile_of_buckets, FunctionStats};
use crate::engine::QueryError;
use crate::read::LakeRead;
use crate::views::columns::{select_list, CUDA_CALL_COLUMNS, XID_COLUMNS};
use crate::views::rows::{self, CudaCall, Xid, NOT_CAPTURED};

/// Rows the views count as CUDA calls (rows::cuda_calls leaves the others out).
const CALL: &str = "pid IS NOT NULL AND function IS NOT NULL";

fn entry_only() -> String {
    format!("coalesce(result_name, '') = '{NOT_CAPTURED}'")
}

fn failed() -> String {
    format!("coalesce(result, 0) <> 0 AND NOT ({})", entry_only())
}

/// The failed CUDA calls of the range, oldest first (timelines and incidents need each one),
/// turned into rows batch by batch as the scan makes them.
pub fn failed_calls(read: &mut LakeRead<'_>) -> Result<Vec<CudaCall>, QueryError> {
    let sql = format!(
        "SELECT {} FROM cuda WHERE {CALL} AND {}",
        select_list(CUDA_CALL_COLUMNS),
        failed()
    );
    let mut calls = read.fold(EventKind::Cuda, &sql, Vec::new, |calls, batch| {
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

/// What the report asks of `cuda` in aggregate: statistics per function, most called first, and the hosts
/// that wrote a call.
#[derive(Debug, Default)]
pub struct CudaSummary {
    /// Per function.
    pub functions: Vec<FunctionStats>,
    /// Hosts with at least one call.
    pub hosts: Vec<String>,
}

/// Counts of one function: calls, failed, entry-only, and the calls of the others per
/// duration bucket.
#[derive(Default)]
struct FunctionCounts {
    calls: u64,
    errors: u64,
    entry_only: u64,
    histogram: foldhash::HashMap<u64, u64>,
}

/// Adds the non-empty host names of `column` to `hosts`. A batch comes from one file, and a
/// file from one host: each run of one name is looked up once.
fn add_hosts(hosts: &mut BTreeSet<String>, column: &arrow_array::StringArray) {
    let mut last: Option<&str> = None;
    for host in column.iter().flatten() {
        if last != Some(host) && !host.is_empty() && !hosts.contains(host) {
            hosts.insert(host.to_string());
        }
        last = Some(host);
    }
}

/// Per-function counts and the hosts, added up batch by batch.
#[derive(Default)]
struct CallTally {
    functions: foldhash::HashMap<String, FunctionCounts>,
    hosts: BTreeSet<String>,
}

/// A text column as `StringArray` (the engine may hand out string views).
fn utf8(column: &ArrayRef) -> Result<ArrayRef, QueryError> {
    match column.data_type() {
        DataType::Utf8 => Ok(Arc::clone(column)),
        _ => datafusion::arrow::compute::cast(column, &DataType::Utf8)
            .map_err(|err| QueryError::Execution(err.to_string())),
    }
}

impl CallTally {
    /// Adds a batch of `host, function, duration_ns, result, result_name` rows.
    fn add(&mut self, batch: &RecordBatch) -> Result<(), QueryError> {
        let (hosts, functions, names) = (
            utf8(batch.column(0))?,
            utf8(batch.column(1))?,
            utf8(batch.column(4))?,
        );
        let (hosts, functions, names) = (
            hosts.as_string::<i32>(),
            functions.as_string::<i32>(),
            names.as_string::<i32>(),
        );
        let durations = batch.column(2).as_primitive_opt::<UInt64Type>();
        let results = batch.column(3).as_primitive_opt::<UInt32Type>();
        add_hosts(&mut self.hosts, hosts);
        for row in 0..batch.num_rows() {
            let function = if functions.is_valid(row) {
                functions.value(row)
            } else {
                continue;
            };
            if !self.functions.contains_key(function) {
                self.functions
                    .insert(function.to_string(), FunctionCounts::default());
            }
            let Some(counts) = self.functions.get_mut(function) else {
                continue;
            };
            counts.calls += 1;
            let entry = names.is_valid(row) && names.value(row) == NOT_CAPTURED;
            if entry {
                counts.entry_only += 1;
                continue;
            }
            let result = results
                .filter(|r| r.is_valid(row))
                .map_or(0, |r| r.value(row));
            if result != 0 {
                counts.errors += 1;
            }
            // A null duration counts as 0, as in rows::cuda_calls.
            let duration = durations
                .filter(|d| d.is_valid(row))
                .map_or(0, |d| d.value(row));
            *counts
                .histogram
                .entry(format::duration_bucket(duration))
                .or_default() += 1;
        }
        Ok(())
    }
}

/// Call statistics per function over a range of `seconds`, and the hosts, in one scan of
/// `cuda` folded as it streams (a `GROUP BY` per question, or `GROUPING SETS`, took two to
/// four times as long in the engine: docs/performance.md, "Fleet lake").
pub fn cuda_summary(read: &mut LakeRead<'_>, seconds: f64) -> Result<CudaSummary, QueryError> {
    let mut failure = None;
    let tally = read.fold(
        EventKind::Cuda,
        &format!("SELECT host, function, duration_ns, result, result_name FROM cuda WHERE {CALL}"),
        CallTally::default,
        |tally, batch| {
            if let Err(err) = tally.add(&batch) {
                failure.get_or_insert(err);
            }
        },
    )?;
    if let Some(err) = failure {
        return Err(err);
    }
    let mut functions: Vec<FunctionStats> = tally
        .functions
        .into_iter()
        .map(|(function, counts)| {
            let mut histogram: Vec<(u64, u64)> = counts.histogram.into_iter().collect();
            histogram.sort_unstable();
            FunctionStats {
                calls: counts.calls as usize,
                per_second: if seconds > 0.0 {
                    counts.calls as f64 / seconds
                } else {
                    0.0
                },
                errors: counts.errors as usize,
                p50_ns: percentile_of_buckets(&histogram, 0.50),
                p99_ns: percentile_of_buckets(&histogram, 0.99),
                entry_only: counts.entry_only as usize,
                function,
            }
        })
        .collect();
    functions.sort_by(|a, b| b.calls.cmp(&a.calls).then(a.function.cmp(&b.function)));
    Ok(CudaSummary {
        functions,
        hosts: tally.hosts.into_iter().collect(),
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
            add_hosts(hosts, column.as_string::<i32>());
        },
    )?;
    if let Some(err) = failure {
        return Err(err);
    }
    Ok((rows, hosts.into_iter().collect()))
}

/// What rows::driver_ops keeps.
pub const DRIVER_OP: &str = "pid IS NOT NULL";
