//! Typed rows of the `cuda_stats` table (stats mode: one row per process, CUDA function and
//! CUresult per interval, docs/schema.md) for the report and the trace. Columns are looked up
//! by name, a missing one reads as null (as in [`super::rows`]); rows without a time, pid,
//! function or call count are left out. Nothing here decides how the rows count: that is the
//! report's rule (`report/functions.rs`) and the trace's (`trace/counters.rs`).

use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, UInt32Type, UInt64Type};
use arrow_array::{Array, RecordBatch, StructArray};

use super::histogram::Durations;
use super::rows::{text, value, Columns, NOT_CAPTURED};

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
    /// Calls of an entry-only function: no duration, no result.
    pub fn entry_only(&self) -> bool {
        self.result_name == NOT_CAPTURED
    }

    /// Calls that returned something other than CUDA_SUCCESS (each is a `cuda` row too).
    pub fn failed(&self) -> bool {
        self.result != 0 && !self.entry_only()
    }

    /// Adds the row's durations (histogram, extremes, sum) to `durations`.
    pub fn add_durations_to(&self, durations: &mut Durations) {
        durations.add_row(
            self.buckets.iter().map(|b| (b.from_ns, b.to_ns, b.calls)),
            (self.duration_min_ns, self.duration_max_ns),
            self.duration_sum_ns,
            self.calls,
        );
    }
}

/// The buckets of row `i` of a `duration_buckets` column.
fn buckets(column: Option<&dyn Array>, i: usize) -> Vec<Bucket> {
    let Some(list) = column.and_then(|c| c.as_list_opt::<i32>()) else {
        return Vec::new();
    };
    if !list.is_valid(i) {
        return Vec::new();
    }
    let entries = list.value(i);
    let Some(entries) = entries.as_any().downcast_ref::<StructArray>() else {
        return Vec::new();
    };
    let field = |name: &str| {
        entries
            .column_by_name(name)
            .and_then(|c| c.as_primitive_opt::<UInt64Type>())
    };
    let (from, to, calls) = (field("from_ns"), field("to_ns"), field("calls"));
    (0..entries.len())
        .filter(|&j| entries.is_valid(j))
        .filter_map(|j| {
            Some(Bucket {
                from_ns: value(from, j)?,
                to_ns: value(to, j)?,
                calls: value(calls, j)?,
            })
        })
        .collect()
}

/// Every row in `batches`, in the order read.
pub fn cuda_stats(batches: &[RecordBatch]) -> Vec<CudaStats> {
    let mut rows = Vec::new();
    for batch in batches {
        let c = Columns(batch);
        let u64s = |name: &str| c.primitive::<UInt64Type>(name);
        let (pid, function, calls) = (
            c.primitive::<Int32Type>("pid"),
            c.strings("function"),
            u64s("calls"),
        );
        let histogram = batch.column_by_name("duration_buckets").map(|c| c.as_ref());
        for (i, time_ns) in c.times().into_iter().enumerate() {
            let (Some(time_ns), Some(pid), Some(function), Some(calls)) =
                (time_ns, value(pid, i), text(function, i), value(calls, i))
            else {
                continue;
            };
            rows.push(CudaStats {
                time_ns,
                host: text(c.strings("host"), i).unwrap_or_default(),
                interval_ns: value(u64s("interval_ns"), i).unwrap_or(0),
                pid,
                comm: text(c.strings("comm"), i).unwrap_or_default(),
                function,
                result: value(c.primitive::<UInt32Type>("result"), i).unwrap_or(0),
                result_name: text(c.strings("result_name"), i).unwrap_or_default(),
                calls,
                bytes_sum: value(u64s("bytes_sum"), i),
                duration_sum_ns: value(u64s("duration_sum_ns"), i),
                duration_min_ns: value(u64s("duration_min_ns"), i),
                duration_max_ns: value(u64s("duration_max_ns"), i),
                buckets: buckets(histogram, i),
            });
        }
    }
    rows
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
