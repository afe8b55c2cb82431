//! The report's questions to the engine: per-function call statistics computed where the rows
//! are (GROUP BY), so a fleet's CUDA calls are counted without being held in memory; only
//! XIDs and failed calls come back as rows. Every scan pays the engine's cost per file (open,
//! footer, plan) once for every file of the table, which over a fleet's day is most of the
//! time, so the report scans each table as few times as it can: `cuda` twice (statistics and
//! hosts in one `GROUPING SETS` query, then the failed calls), `xid` and `driver` once.
//!
//! Percentiles are nearest-rank over a histogram per function whose buckets are the durations
//! as the page writes them ([`format::duration`], three significant digits, each bucket named
//! by its first duration, [`format::duration_bucket`]): the bucket that holds the rank-th call
//! is exactly the one whose label the page would show, so the page is the same as with every
//! duration in memory, and the histogram has a few thousand buckets at most.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Int64Type, UInt64Type};
use arrow_array::{Array, ArrayRef, RecordBatch, UInt64Array};
use arrow_schema::DataType;
use datafusion::logical_expr::{create_udf, ColumnarValue, ScalarUDF, Volatility};

use super::format;
use super::functions::{percentile_of_buckets, FunctionStats};
use crate::engine::QueryError;
use crate::read::LakeRead;
use crate::views::rows::NOT_CAPTURED;

/// The name of the bucket function in SQL.
const DURATION_BUCKET: &str = "gpuship_duration_bucket";

/// Rows the views count as CUDA calls (rows::cuda_calls leaves the others out).
const CALL: &str = "pid IS NOT NULL AND function IS NOT NULL";

/// `duration_ns` to the first duration the page writes like it ([`format::duration_bucket`]),
/// for GROUP BY: a number per row instead of a formatted string. A null duration counts as 0,
/// as in rows::cuda_calls.
pub fn duration_bucket_udf() -> ScalarUDF {
    create_udf(
        DURATION_BUCKET,
        vec![DataType::UInt64],
        DataType::UInt64,
        Volatility::Immutable,
        Arc::new(
            |args: &[ColumnarValue]| -> datafusion::error::Result<ColumnarValue> {
                let arrays = ColumnarValue::values_to_arrays(args)?;
                let durations = arrays[0].as_primitive::<UInt64Type>();
                let buckets: UInt64Array = durations
                    .iter()
                    .map(|d| Some(format::duration_bucket(d.unwrap_or(0))))
                    .collect();
                Ok(ColumnarValue::Array(Arc::new(buckets) as ArrayRef))
            },
        ),
    )
}

fn entry_only() -> String {
    format!("coalesce(result_name, '') = '{NOT_CAPTURED}'")
}

fn failed() -> String {
    format!("coalesce(result, 0) <> 0 AND NOT ({})", entry_only())
}

/// The failed CUDA calls of the range, as rows (timelines and incidents need each one).
pub fn failed_calls(read: &mut LakeRead<'_>) -> Result<Vec<RecordBatch>, QueryError> {
    read.query(&format!("SELECT * FROM cuda WHERE {CALL} AND {}", failed()))
}

fn u64_at(batch: &RecordBatch, column: usize, row: usize) -> u64 {
    let array = batch.column(column);
    if let Some(values) = array.as_primitive_opt::<Int64Type>() {
        return values.value(row).max(0) as u64;
    }
    array
        .as_primitive_opt::<UInt64Type>()
        .map_or(0, |values| values.value(row))
}

fn text_at(batch: &RecordBatch, column: usize, row: usize) -> String {
    let array = batch.column(column);
    if array.is_null(row) {
        return String::new();
    }
    array
        .as_string_opt::<i32>()
        .map(|values| values.value(row).to_string())
        .or_else(|| {
            array
                .as_string_view_opt()
                .map(|values| values.value(row).to_string())
        })
        .unwrap_or_default()
}

/// What one scan of `cuda` says: statistics per function, most called first, and the hosts
/// that wrote a call.
#[derive(Debug, Default)]
pub struct CudaSummary {
    /// Per function.
    pub functions: Vec<FunctionStats>,
    /// Hosts with at least one call.
    pub hosts: Vec<String>,
}

/// Counts of one function: calls, failed, entry-only, and the histogram of the others'
/// durations as `(bucket, calls)`.
#[derive(Default)]
struct FunctionCounts {
    calls: u64,
    errors: u64,
    entry_only: u64,
    histogram: Vec<(u64, u64)>,
}

/// Call statistics per function over a range of `seconds`, and the hosts, in one scan: a
/// `GROUP BY GROUPING SETS` whose first set is (function, entry-only, failed, duration bucket)
/// and whose second is the host. Rows of the host set have no function.
pub fn cuda_summary(read: &mut LakeRead<'_>, seconds: f64) -> Result<CudaSummary, QueryError> {
    let batches = read.query(&format!(
        "SELECT function, host, entry, failed, bucket, count(*) AS calls FROM ( \
           SELECT function, host, {DURATION_BUCKET}(duration_ns) AS bucket, \
             {entry} AS entry, {failed} AS failed \
           FROM cuda WHERE {CALL}) \
         GROUP BY GROUPING SETS ((function, entry, failed, bucket), (host))",
        entry = entry_only(),
        failed = failed(),
    ))?;
    let mut by_function: BTreeMap<String, FunctionCounts> = BTreeMap::new();
    let mut hosts = Vec::new();
    for batch in &batches {
        let (entry, failed) = (batch.column(2).as_boolean(), batch.column(3).as_boolean());
        for row in 0..batch.num_rows() {
            let calls = u64_at(batch, 5, row);
            if batch.column(0).is_null(row) {
                let host = text_at(batch, 1, row);
                if !host.is_empty() {
                    hosts.push(host);
                }
                continue;
            }
            let counts = by_function.entry(text_at(batch, 0, row)).or_default();
            counts.calls += calls;
            if failed.value(row) {
                counts.errors += calls;
            }
            if entry.value(row) {
                counts.entry_only += calls;
            } else {
                counts.histogram.push((u64_at(batch, 4, row), calls));
            }
        }
    }
    let mut functions: Vec<FunctionStats> = by_function
        .into_iter()
        .map(|(function, mut counts)| {
            // Failed and successful calls of one bucket are two rows: merge them.
            counts.histogram.sort_unstable();
            counts.histogram.dedup_by(|next, kept| {
                let same = next.0 == kept.0;
                if same {
                    kept.1 += next.1;
                }
                same
            });
            FunctionStats {
                calls: counts.calls as usize,
                per_second: if seconds > 0.0 {
                    counts.calls as f64 / seconds
                } else {
                    0.0
                },
                errors: counts.errors as usize,
                p50_ns: percentile_of_buckets(&counts.histogram, 0.50),
                p99_ns: percentile_of_buckets(&counts.histogram, 0.99),
                entry_only: counts.entry_only as usize,
                function,
            }
        })
        .collect();
    functions.sort_by(|a, b| b.calls.cmp(&a.calls).then(a.function.cmp(&b.function)));
    hosts.sort();
    Ok(CudaSummary { functions, hosts })
}

/// Rows of `table` the views count (with the columns that identify them), and the hosts that
/// wrote them, in one scan.
pub fn count_by_host(
    read: &mut LakeRead<'_>,
    table: &str,
    valid: &str,
) -> Result<(usize, Vec<String>), QueryError> {
    let batches = read.query(&format!(
        "SELECT host, count(*) FROM {table} WHERE {valid} GROUP BY host"
    ))?;
    let mut rows = 0;
    let mut hosts = Vec::new();
    for batch in &batches {
        for row in 0..batch.num_rows() {
            rows += u64_at(batch, 1, row) as usize;
            let host = text_at(batch, 0, row);
            if !host.is_empty() {
                hosts.push(host);
            }
        }
    }
    Ok((rows, hosts))
}

/// What rows::driver_ops keeps.
pub const DRIVER_OP: &str = "pid IS NOT NULL";
