//! Typed rows of the `cuda_stats` table (stats mode: one row per process, CUDA function and
//! CUresult per interval, docs/schema.md) for the report and the trace. Columns are looked up
//! by name, a missing one reads as null (as in [`super::rows`]); rows without a time, pid,
//! function or call count are left out. Nothing here decides how the rows count: that is the
//! report's rule (`report/functions.rs`) and the trace's (`trace/counters.rs`).

use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, UInt32Type, UInt64Type};
use arrow_array::{Array, Int32Array, RecordBatch, StructArray, UInt32Array, UInt64Array};

use super::histogram::Durations;
use super::rows::{text, value, Columns, NOT_CAPTURED};
use super::text::Text;

/// The columns [`cuda_stats`] reads: a query selects these, not `*`.
pub const CUDA_STATS_COLUMNS: &[&str] = &[
    "time",
    "time_ns",
    "host",
    "interval_ns",
    "pid",
    "comm",
    "function",
    "result",
    "result_name",
    "calls",
    "bytes_sum",
    "duration_sum_ns",
    "duration_min_ns",
    "duration_max_ns",
    "duration_buckets",
];

/// One bucket of a row's duration histogram: `calls` took `from_ns <= duration < to_ns`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bucket {
    pub from_ns: u64,
    pub to_ns: u64,
    pub calls: u64,
}

/// One `cuda_stats` row. Each field is the column of the same name; `time_ns` (the end of the
/// interval) falls back to `time`, and `buckets` is `duration_buckets` (empty when null).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CudaStats {
    pub time_ns: i64,
    pub host: String,
    pub interval_ns: u64,
    pub pid: i32,
    pub comm: String,
    pub function: String,
    pub result: u32,
    pub result_name: String,
    pub calls: u64,
    pub bytes_sum: Option<u64>,
    pub duration_sum_ns: Option<u64>,
    pub duration_min_ns: Option<u64>,
    pub duration_max_ns: Option<u64>,
    pub buckets: Vec<Bucket>,
}

impl CudaStats {
    /// The row as a [`StatsRow`], which the folds read.
    pub fn as_row(&self) -> StatsRow<'_> {
        StatsRow {
            host: &self.host,
            pid: self.pid,
            function: &self.function,
            result: self.result,
            result_name: &self.result_name,
            calls: self.calls,
            duration_sum_ns: self.duration_sum_ns,
            duration_min_ns: self.duration_min_ns,
            duration_max_ns: self.duration_max_ns,
            buckets: RowBuckets::Listed(&self.buckets),
        }
    }

    /// Calls of an entry-only function: no duration, no result.
    pub fn entry_only(&self) -> bool {
        self.as_row().entry_only()
    }

    /// Calls that returned something other than CUDA_SUCCESS (each is a `cuda` row too).
    pub fn failed(&self) -> bool {
        self.as_row().failed()
    }

    /// Adds the row's durations (histogram, extremes, sum) to `durations`.
    pub fn add_durations_to(&self, durations: &mut Durations) {
        self.as_row().add_durations_to(durations);
    }
}

/// A `cuda_stats` row borrowed from its batch ([`StatsBatch::row`]) or from a [`CudaStats`]:
/// what a fold over a fleet's rows reads without building a string per row. The fields are
/// those of [`CudaStats`] that say how the row counts.
#[derive(Debug, Clone, Copy)]
pub struct StatsRow<'a> {
    pub host: &'a str,
    pub pid: i32,
    pub function: &'a str,
    pub result: u32,
    pub result_name: &'a str,
    pub calls: u64,
    pub duration_sum_ns: Option<u64>,
    pub duration_min_ns: Option<u64>,
    pub duration_max_ns: Option<u64>,
    buckets: RowBuckets<'a>,
}

/// Where a [`StatsRow`]'s histogram is.
#[derive(Debug, Clone, Copy)]
enum RowBuckets<'a> {
    Listed(&'a [Bucket]),
    InColumn(&'a BucketColumn<'a>, usize),
}

impl StatsRow<'_> {
    /// Calls of an entry-only function: no duration, no result.
    pub fn entry_only(&self) -> bool {
        self.result_name == NOT_CAPTURED
    }

    /// Calls that returned something other than CUDA_SUCCESS (each is a `cuda` row too).
    pub fn failed(&self) -> bool {
        self.result != 0 && !self.entry_only()
    }

    /// Calls `each` with every bucket of the row's histogram (none when it has none).
    pub fn for_each_bucket(&self, each: impl FnMut(Bucket)) {
        match self.buckets {
            RowBuckets::Listed(buckets) => buckets.iter().copied().for_each(each),
            RowBuckets::InColumn(column, i) => column.iter(i).for_each(each),
        }
    }

    /// Adds the row's durations (histogram, extremes, sum) to `durations`.
    pub fn add_durations_to(&self, durations: &mut Durations) {
        let extremes = (self.duration_min_ns, self.duration_max_ns);
        let triple = |b: Bucket| (b.from_ns, b.to_ns, b.calls);
        match self.buckets {
            RowBuckets::Listed(buckets) => durations.add_row(
                buckets.iter().copied().map(triple),
                extremes,
                self.duration_sum_ns,
                self.calls,
            ),
            RowBuckets::InColumn(column, i) => durations.add_row(
                column.iter(i).map(triple),
                extremes,
                self.duration_sum_ns,
                self.calls,
            ),
        }
    }
}

/// A `duration_buckets` column resolved once per batch: the list's offsets and its entries'
/// three fields, so a row's buckets are read without looking anything up by name again.
#[derive(Debug)]
struct BucketColumn<'a> {
    list: &'a arrow_array::ListArray,
    entries: &'a StructArray,
    from: Option<&'a arrow_array::UInt64Array>,
    to: Option<&'a arrow_array::UInt64Array>,
    calls: Option<&'a arrow_array::UInt64Array>,
}

impl<'a> BucketColumn<'a> {
    fn new(batch: &'a RecordBatch) -> Option<Self> {
        let list = batch
            .column_by_name("duration_buckets")?
            .as_list_opt::<i32>()?;
        let entries = list.values().as_any().downcast_ref::<StructArray>()?;
        let field = |name: &str| {
            entries
                .column_by_name(name)
                .and_then(|c| c.as_primitive_opt::<UInt64Type>())
        };
        Some(Self {
            list,
            entries,
            from: field("from_ns"),
            to: field("to_ns"),
            calls: field("calls"),
        })
    }

    /// The buckets of row `i` (none when the list is null).
    fn iter(&self, i: usize) -> impl Iterator<Item = Bucket> + '_ {
        let range = if self.list.is_valid(i) {
            let offsets = self.list.value_offsets();
            (offsets[i] as usize)..(offsets[i + 1] as usize)
        } else {
            0..0
        };
        range.filter(|&j| self.entries.is_valid(j)).filter_map(|j| {
            Some(Bucket {
                from_ns: value(self.from, j)?,
                to_ns: value(self.to, j)?,
                calls: value(self.calls, j)?,
            })
        })
    }
}

/// One batch of `cuda_stats` rows with its columns resolved once.
pub struct StatsBatch<'a> {
    times: Vec<Option<i64>>,
    host: Option<Text<'a>>,
    interval: Option<&'a UInt64Array>,
    pid: Option<&'a Int32Array>,
    comm: Option<Text<'a>>,
    function: Option<Text<'a>>,
    result: Option<&'a UInt32Array>,
    result_name: Option<Text<'a>>,
    calls: Option<&'a UInt64Array>,
    bytes_sum: Option<&'a UInt64Array>,
    durations: [Option<&'a UInt64Array>; 3],
    histogram: Option<BucketColumn<'a>>,
}

impl<'a> StatsBatch<'a> {
    pub fn new(batch: &'a RecordBatch) -> Self {
        let c = Columns(batch);
        let u64s = |name: &str| c.primitive::<UInt64Type>(name);
        Self {
            times: c.times(),
            host: c.strings("host"),
            interval: u64s("interval_ns"),
            pid: c.primitive::<Int32Type>("pid"),
            comm: c.strings("comm"),
            function: c.strings("function"),
            result: c.primitive::<UInt32Type>("result"),
            result_name: c.strings("result_name"),
            calls: u64s("calls"),
            bytes_sum: u64s("bytes_sum"),
            durations: ["duration_sum_ns", "duration_min_ns", "duration_max_ns"].map(u64s),
            histogram: BucketColumn::new(batch),
        }
    }

    pub fn len(&self) -> usize {
        self.times.len()
    }

    pub fn is_empty(&self) -> bool {
        self.times.is_empty()
    }

    /// Row `i` borrowed; None without a time, pid, function or call count.
    pub fn row(&self, i: usize) -> Option<StatsRow<'_>> {
        let text = |column: Option<Text<'a>>| column.filter(|c| c.is_valid(i)).map(|c| c.value(i));
        self.times[i]?;
        let [sum, min, max] = self.durations.map(|column| value(column, i));
        Some(StatsRow {
            host: text(self.host).unwrap_or_default(),
            pid: value(self.pid, i)?,
            function: text(self.function)?,
            result: value(self.result, i).unwrap_or(0),
            result_name: text(self.result_name).unwrap_or_default(),
            calls: value(self.calls, i)?,
            duration_sum_ns: sum,
            duration_min_ns: min,
            duration_max_ns: max,
            buckets: match &self.histogram {
                Some(column) => RowBuckets::InColumn(column, i),
                None => RowBuckets::Listed(&[]),
            },
        })
    }

    /// Row `i` built; None without a time, pid, function or call count.
    pub fn owned(&self, i: usize) -> Option<CudaStats> {
        let row = self.row(i)?;
        Some(CudaStats {
            time_ns: self.times[i]?,
            host: row.host.to_string(),
            interval_ns: value(self.interval, i).unwrap_or(0),
            pid: row.pid,
            comm: text(self.comm, i).unwrap_or_default(),
            function: row.function.to_string(),
            result: row.result,
            result_name: row.result_name.to_string(),
            calls: row.calls,
            bytes_sum: value(self.bytes_sum, i),
            duration_sum_ns: row.duration_sum_ns,
            duration_min_ns: row.duration_min_ns,
            duration_max_ns: row.duration_max_ns,
            buckets: self
                .histogram
                .as_ref()
                .map_or_else(Vec::new, |h| h.iter(i).collect()),
        })
    }
}

/// Every row in `batches`, in the order read.
pub fn cuda_stats(batches: &[RecordBatch]) -> Vec<CudaStats> {
    batches
        .iter()
        .flat_map(|batch| {
            let rows = StatsBatch::new(batch);
            (0..rows.len()).filter_map(move |i| rows.owned(i))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::views::fixtures::{stats_batch, stats_row};

    #[test]
    fn rows_come_out_typed_with_their_histograms() {
        let mut entry_only = stats_row(20_000_000_000, "cuLaunchKernelEx", 4, &[]);
        entry_only.result_name = NOT_CAPTURED.into();
        entry_only.durations = None;
        let mut failed = stats_row(20_000_000_000, "cuMemAlloc_v2", 2, &[(1_024, 1_280, 2)]);
        failed.result = 2;
        failed.result_name = "CUDA_ERROR_OUT_OF_MEMORY".into();
        failed.bytes_sum = Some(u64::MAX);
        let batch = stats_batch(&[
            stats_row(
                10_000_000_000,
                "cuLaunchKernel",
                5,
                &[(896, 1_024, 3), (1_024, 1_280, 2)],
            ),
            entry_only,
            failed,
        ]);
        let rows = cuda_stats(&[batch]);
        assert_eq!(rows.len(), 3);
        let launch = &rows[0];
        assert_eq!(
            (launch.time_ns, launch.interval_ns, launch.pid, launch.calls),
            (10_000_000_000, 10_000_000_000, 100, 5)
        );
        assert_eq!(
            (launch.host.as_str(), launch.comm.as_str()),
            ("node-a", "train")
        );
        assert_eq!(
            launch.buckets,
            [
                Bucket {
                    from_ns: 896,
                    to_ns: 1_024,
                    calls: 3
                },
                Bucket {
                    from_ns: 1_024,
                    to_ns: 1_280,
                    calls: 2
                },
            ]
        );
        assert_eq!(
            (
                launch.duration_min_ns,
                launch.duration_max_ns,
                launch.duration_sum_ns
            ),
            (Some(896), Some(1_279), Some(3 * 896 + 2 * 1_024))
        );
        assert!(!launch.failed() && !launch.entry_only());
        assert!(rows[1].entry_only() && !rows[1].failed());
        assert!(rows[1].buckets.is_empty() && rows[1].duration_sum_ns.is_none());
        assert!(rows[2].failed());
        assert_eq!(rows[2].bytes_sum, Some(u64::MAX));
    }

    #[test]
    fn rows_without_their_identity_are_left_out_and_missing_columns_read_as_null() {
        let batch = stats_batch(&[stats_row(5, "cuLaunchKernel", 1, &[(64, 80, 1)])]);
        let keep: Vec<usize> = ["time", "pid", "function", "calls"]
            .iter()
            .map(|n| batch.schema().index_of(n).unwrap())
            .collect();
        let rows = cuda_stats(&[batch.project(&keep).unwrap()]);
        assert_eq!(rows.len(), 1);
        assert_eq!(
            (rows[0].time_ns, rows[0].interval_ns),
            (0, 0),
            "µs of `time`"
        );
        assert!(rows[0].buckets.is_empty() && rows[0].host.is_empty());
        let without_calls: Vec<usize> = ["time", "pid", "function"]
            .iter()
            .map(|n| batch.schema().index_of(n).unwrap())
            .collect();
        assert!(cuda_stats(&[batch.project(&without_calls).unwrap()]).is_empty());
    }
}
