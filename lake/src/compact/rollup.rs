//! The hourly roll-up of `cuda_stats` that compaction writes with each compacted hour: one row
//! per host, boot, process, CUDA function and result for the hour instead of one per
//! statistics interval (10 s by default: up to 360 times fewer rows). `gpuship report` reads it
//! for the hours its range covers whole, where its per-function statistics would otherwise fold
//! every interval's row of a fleet's day (hundreds of millions).
//!
//! A roll-up row is a `cuda_stats` row of the same schema as the rows it adds up, so every
//! reader of that table reads it:
//!
//! - `calls`, `bytes_sum`, `duration_sum_ns`, `calls_estimated`, `bytes_estimated` and
//!   `interval_ns` (the intervals' lengths: at most the hour per process) are sums, saturating at
//!   the type's limit; a sum of nulls is null;
//! - `duration_min_ns` / `duration_max_ns` are the extremes, `duration_buckets` the histograms
//!   added bucket by bucket, `duration_p50_ns` / `duration_p99_ns` read from that histogram as
//!   the agent reads one row's (interpolated within a bucket, kept within the extremes);
//! - `observed_fraction` is `calls / calls_estimated` (what the estimate scaled by);
//! - `time` and `time_ns` are those of the group's last row (the end of its last interval);
//! - every other column (`comm`, `result_name`, the workload columns) is the group's first row's.
//!
//! Rows without a time, pid, function or call count (which no view counts) are left out.
//!
//! Where it lives and how it commits: `cuda_stats_hourly/dt=.../hour=HH/rollup-<run>-<n>.parquet`,
//! the same hour as the `cuda_stats` folder it sums, outside it so that engines that glob
//! `cuda_stats/**` never count a row twice. The files are complete before the hour's marker is
//! written, and the marker names them (`rollups`): a roll-up counts only when its marker is
//! committed, exactly like the compacted files, and covers exactly that marker's rows. One that
//! no marker names is a killed run's leftover, deleted by the next run.

use std::collections::BTreeMap;

use arrow_array::cast::AsArray;
use arrow_array::types::{Int64Type, UInt64Type};
use arrow_array::{Array, ArrayRef, Int64Array, RecordBatch, UInt32Array, UInt64Array};
use arrow_schema::{ArrowError, DataType, SchemaRef};
use arrow_select::concat::concat_batches;
use arrow_select::take::take_record_batch;

use crate::views::cuda_stats::{Bucket, StatsBatch};

mod columns;
use columns::summed_column;

/// The folder tree of the roll-up.
pub const ROLLUP_TABLE: &str = "cuda_stats_hourly";
/// The table it sums.
pub const ROLLED_UP_TABLE: &str = "cuda_stats";
/// Names of roll-up files start with this.
pub const ROLLUP_PREFIX: &str = "rollup-";

/// The roll-up folder of a `cuda_stats` hour folder (`cuda_stats/dt=.../hour=HH`); `None` for
/// the other tables' folders.
pub fn rollup_folder(hour_folder: &str) -> Option<String> {
    let rest = hour_folder
        .strip_prefix(ROLLED_UP_TABLE)?
        .strip_prefix('/')?;
    Some(format!("{ROLLUP_TABLE}/{rest}"))
}

/// A roll-up file's name (complete; an unfinished upload's staging name does not end in
/// `.parquet`).
pub fn is_rollup(name: &str) -> bool {
    name.starts_with(ROLLUP_PREFIX)
        && name.ends_with(".parquet")
        && !name.contains('/')
        && name.len() > ROLLUP_PREFIX.len() + ".parquet".len()
}

/// The name of the `index`-th roll-up file of `run`.
pub fn rollup_name(run: &str, index: usize) -> String {
    format!("{ROLLUP_PREFIX}{run}-{index:04}.parquet")
}

/// What identifies a group: one roll-up row.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    host: String,
    boot_id: Option<String>,
    pid: i32,
    function: String,
    result: u32,
}

/// One group's sums so far.
#[derive(Debug, Default)]
struct Group {
    /// Largest `time` and `time_ns` values (raw).
    last_time: Option<i64>,
    last_time_ns: Option<i64>,
    interval_ns: Option<u64>,
    calls: u64,
    bytes_sum: Option<u64>,
    calls_estimated: Option<u64>,
    bytes_estimated: Option<u64>,
    duration_sum_ns: Option<u64>,
    duration_min_ns: Option<u64>,
    duration_max_ns: Option<u64>,
    /// Calls per `(from_ns, to_ns)` bucket.
    buckets: BTreeMap<(u64, u64), u64>,
    /// A row of the group had a histogram.
    has_buckets: bool,
}

fn add(sum: &mut Option<u64>, value: Option<u64>) {
    if let Some(value) = value {
        *sum = Some(sum.unwrap_or(0).saturating_add(value));
    }
}

fn keep(extreme: &mut Option<u64>, value: Option<u64>, pick: fn(u64, u64) -> u64) {
    if let Some(value) = value {
        *extreme = Some(extreme.map_or(value, |e| pick(e, value)));
    }
}

fn later(last: &mut Option<i64>, value: Option<i64>) {
    if let Some(value) = value {
        *last = Some(last.map_or(value, |l| l.max(value)));
    }
}

/// A column as raw `i64` values (`time` is a timestamp), when it exists and can be read so.
fn raw_times(batch: &RecordBatch, name: &str) -> Result<Option<Int64Array>, ArrowError> {
    match batch.column_by_name(name) {
        Some(column) => {
            let cast = arrow_cast::cast(column, &DataType::Int64)?;
            Ok(Some(cast.as_primitive::<Int64Type>().clone()))
        }
        None => Ok(None),
    }
}

fn u64_column<'a>(batch: &'a RecordBatch, name: &str) -> Option<&'a UInt64Array> {
    batch.column_by_name(name)?.as_primitive_opt::<UInt64Type>()
}

fn at<T: arrow_array::ArrowPrimitiveType>(
    array: Option<&arrow_array::PrimitiveArray<T>>,
    i: usize,
) -> Option<T::Native> {
    array.filter(|a| a.is_valid(i)).map(|a| a.value(i))
}

/// The roll-up of one host's `cuda_stats` rows of one schema, fed sorted batches and drained
/// into one batch of that schema per host (so memory holds one host's groups).
#[derive(Debug)]
pub struct HostRollup {
    schema: SchemaRef,
    /// Each group's place in `groups`.
    index: foldhash::HashMap<Key, usize>,
    /// The groups, in creation order.
    groups: Vec<Group>,
    /// The first row of every group, copied out of its batch, in creation order.
    first_rows: Vec<RecordBatch>,
    /// Rows added (counted ones only).
    rows_in: u64,
}

impl HostRollup {
    /// An empty roll-up of rows of `schema`.
    pub fn new(schema: SchemaRef) -> Self {
        Self {
            schema,
            index: Default::default(),
            groups: Vec::new(),
            first_rows: Vec::new(),
            rows_in: 0,
        }
    }

    /// Rows added since the last [`drain`](Self::drain).
    pub fn rows_in(&self) -> u64 {
        self.rows_in
    }

    /// Adds the rows of `batch` (of this roll-up's schema).
    pub fn add(&mut self, batch: &RecordBatch) -> Result<(), ArrowError> {
        let rows = StatsBatch::new(batch);
        let boot_ids = batch
            .column_by_name("boot_id")
            .and_then(|c| c.as_string_opt::<i32>());
        let (times, times_ns) = (raw_times(batch, "time")?, raw_times(batch, "time_ns")?);
        let interval = u64_column(batch, "interval_ns");
        let bytes_sum = u64_column(batch, "bytes_sum");
        let calls_estimated = u64_column(batch, "calls_estimated");
        let bytes_estimated = u64_column(batch, "bytes_estimated");
        let mut new_rows: Vec<u32> = Vec::new();
        let mut in_batch: foldhash::HashMap<(&str, Option<&str>, i32, &str, u32), usize> =
            Default::default();
        for i in 0..rows.len() {
            let Some(row) = rows.row(i) else { continue };
            self.rows_in += 1;
            let boot_id = boot_ids.filter(|b| b.is_valid(i)).map(|b| b.value(i));
            // Looked up by the batch's own strings first: a key is built once per group and
            // batch, not once per row (a fleet's hour has millions of rows).
            let seen = (row.host, boot_id, row.pid, row.function, row.result);
            let slot = match in_batch.get(&seen) {
                Some(&slot) => slot,
                None => {
                    let key = Key {
                        host: row.host.to_string(),
                        boot_id: boot_id.map(str::to_string),
                        pid: row.pid,
                        function: row.function.to_string(),
                        result: row.result,
                    };
                    let next = self.groups.len();
                    let slot = *self.index.entry(key).or_insert(next);
                    if slot == next {
                        new_rows.push(i as u32);
                        self.groups.push(Group::default());
                    }
                    in_batch.insert(seen, slot);
                    slot
                }
            };
            let group = &mut self.groups[slot];
            later(
                &mut group.last_time,
                times.as_ref().and_then(|t| at(Some(t), i)),
            );
            later(
                &mut group.last_time_ns,
                times_ns.as_ref().and_then(|t| at(Some(t), i)),
            );
            add(&mut group.interval_ns, at(interval, i));
            group.calls = group.calls.saturating_add(row.calls);
            add(&mut group.bytes_sum, at(bytes_sum, i));
            // A row without an estimate was observed whole.
            add(
                &mut group.calls_estimated,
                calls_estimated.map(|c| at(Some(c), i).unwrap_or(row.calls)),
            );
            add(&mut group.bytes_estimated, at(bytes_estimated, i));
            add(&mut group.duration_sum_ns, row.duration_sum_ns);
            keep(&mut group.duration_min_ns, row.duration_min_ns, u64::min);
            keep(&mut group.duration_max_ns, row.duration_max_ns, u64::max);
            row.for_each_bucket(
                |Bucket {
                     from_ns,
                     to_ns,
                     calls,
                 }| {
                    group.has_buckets = true;
                    let slot = group.buckets.entry((from_ns, to_ns)).or_default();
                    *slot = slot.saturating_add(calls);
                },
            );
        }
        if !new_rows.is_empty() {
            let indices = UInt32Array::from(new_rows);
            self.first_rows.push(take_record_batch(batch, &indices)?);
        }
        Ok(())
    }

    /// The roll-up rows of what was added, in the order their groups first appeared; `None`
    /// when nothing was. Leaves the roll-up empty.
    pub fn drain(&mut self) -> Result<Option<RecordBatch>, ArrowError> {
        self.rows_in = 0;
        if self.groups.is_empty() {
            return Ok(None);
        }
        let firsts = concat_batches(&self.schema, &std::mem::take(&mut self.first_rows))?;
        self.index.clear();
        let groups = std::mem::take(&mut self.groups);
        let mut columns: Vec<ArrayRef> = firsts.columns().to_vec();
        for (position, field) in self.schema.fields().iter().enumerate() {
            let built = summed_column(field.name(), field.data_type(), &groups)?;
            if let Some(array) = built {
                columns[position] = array;
            }
        }
        Ok(Some(RecordBatch::try_new(self.schema.clone(), columns)?))
    }
}

#[cfg(test)]
mod tests;
