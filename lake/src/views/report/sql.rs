//! The report's questions to the engine: per-function call statistics computed where the rows
//! are (GROUP BY), so a fleet's CUDA calls are counted without being held in memory; only
//! XIDs and failed calls come back as rows.
//!
//! Percentiles are nearest-rank over a histogram per function whose buckets are the durations
//! as the page writes them ([`format::duration`], three significant digits): the bucket that
//! holds the rank-th call is exactly the one whose label the page would show, so the page is the
//! same as with every duration in memory, and the histogram has a few thousand buckets at most.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_array::builder::StringBuilder;
use arrow_array::cast::AsArray;
use arrow_array::types::{Int64Type, UInt64Type};
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::DataType;
use datafusion::logical_expr::{create_udf, ColumnarValue, ScalarUDF, Volatility};

use super::format;
use super::functions::{percentile_of_buckets, FunctionStats};
use crate::engine::QueryError;
use crate::read::LakeRead;
use crate::views::rows::NOT_CAPTURED;

/// The name of the bucket function in SQL.
const DURATION_LABEL: &str = "gpuship_duration_label";

/// Rows the views count as CUDA calls (rows::cuda_calls leaves the others out).
const CALL: &str = "pid IS NOT NULL AND function IS NOT NULL";

/// `duration_ns` as the page writes it, for GROUP BY. Labels are formatted into one reused
/// buffer: this runs once per CUDA row of the range.
pub fn duration_label_udf() -> ScalarUDF {
    create_udf(
        DURATION_LABEL,
        vec![DataType::UInt64],
        DataType::Utf8,
        Volatility::Immutable,
        Arc::new(
            |args: &[ColumnarValue]| -> datafusion::error::Result<ColumnarValue> {
                let arrays = ColumnarValue::values_to_arrays(args)?;
                let durations = arrays[0].as_primitive::<UInt64Type>();
                let mut labels = StringBuilder::with_capacity(durations.len(), durations.len() * 8);
                let mut label = String::with_capacity(16);
                for duration in durations.iter() {
                    label.clear();
                    format::write_duration(&mut label, duration.unwrap_or(0));
                    labels.append_value(&label);
                }
                Ok(ColumnarValue::Array(Arc::new(labels.finish()) as ArrayRef))
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

/// Call statistics per function over a range of `seconds`, most called first.
pub fn per_function(
    read: &mut LakeRead<'_>,
    seconds: f64,
) -> Result<Vec<FunctionStats>, QueryError> {
    let counts = read.query(&format!(
        "SELECT function, count(*) AS calls, \
         sum(CASE WHEN {failed} THEN 1 ELSE 0 END) AS errors, \
         sum(CASE WHEN {entry} THEN 1 ELSE 0 END) AS entry_only \
         FROM cuda WHERE {CALL} GROUP BY function",
        failed = failed(),
        entry = entry_only()
    ))?;
    let buckets = read.query(&format!(
        // A null duration counts as 0 (as in rows::cuda_calls): the label function says "0 ns"
        // for it, and `min` of a bucket of nulls reads as 0.
        "SELECT function, min(duration_ns) AS low, count(*) AS calls \
         FROM cuda WHERE {CALL} AND NOT ({entry}) \
         GROUP BY function, {DURATION_LABEL}(duration_ns)",
        entry = entry_only()
    ))?;
    let mut histograms: BTreeMap<String, Vec<(u64, u64)>> = BTreeMap::new();
    for batch in &buckets {
        for row in 0..batch.num_rows() {
            histograms
                .entry(text_at(batch, 0, row))
                .or_default()
                .push((u64_at(batch, 1, row), u64_at(batch, 2, row)));
        }
    }
    let mut stats = Vec::new();
    for batch in &counts {
        for row in 0..batch.num_rows() {
            let function = text_at(batch, 0, row);
            let calls = u64_at(batch, 1, row) as usize;
            let mut histogram = histograms.remove(&function).unwrap_or_default();
            histogram.sort_unstable();
            stats.push(FunctionStats {
                calls,
                per_second: if seconds > 0.0 {
                    calls as f64 / seconds
                } else {
                    0.0
                },
                errors: u64_at(batch, 2, row) as usize,
                p50_ns: percentile_of_buckets(&histogram, 0.50),
                p99_ns: percentile_of_buckets(&histogram, 0.99),
                entry_only: u64_at(batch, 3, row) as usize,
                function,
            });
        }
    }
    stats.sort_by(|a, b| b.calls.cmp(&a.calls).then(a.function.cmp(&b.function)));
    Ok(stats)
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

/// Hosts that wrote a counted row of `table`.
pub fn hosts(read: &mut LakeRead<'_>, table: &str, valid: &str) -> Result<Vec<String>, QueryError> {
    let batches = read.query(&format!(
        "SELECT DISTINCT host FROM {table} WHERE {valid} AND host IS NOT NULL AND host <> ''"
    ))?;
    Ok(batches
        .iter()
        .flat_map(|b| (0..b.num_rows()).map(move |row| text_at(b, 0, row)))
        .collect())
}

/// What rows::cuda_calls keeps.
pub const CUDA_CALL: &str = CALL;
/// What rows::driver_ops keeps.
pub const DRIVER_OP: &str = "pid IS NOT NULL";
