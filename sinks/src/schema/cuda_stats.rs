//! The `cuda_stats` table: one row per (process, CUDA function, result) per statistics
//! interval, for the functions the agent aggregates (`[sources.cuda] stats`) instead of
//! recording call by call: how many calls, their bytes, and their durations (sum, min, max,
//! p50, p99 and the histogram they were read from). `time` is the end of the interval.

use std::sync::Arc;

use arrow_array::builder::{ListBuilder, StructBuilder, UInt64Builder};
use arrow_array::{ArrayRef, Float64Array, Int32Array, StringArray, UInt32Array, UInt64Array};
use arrow_schema::{DataType, Field, Fields, Schema};

use super::common::common_fields;
use super::row_batch::{KindRows, RowBatchBuilder};
use super::workload::{workload_fields, Workload};
use crate::EventKind;

/// One histogram bucket: calls that took `from_ns <= duration < to_ns` (the last bucket's
/// `to_ns` is `u64::MAX`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DurationBucket {
    /// Inclusive lower bound.
    pub from_ns: u64,
    /// Exclusive upper bound.
    pub to_ns: u64,
    /// Calls in the bucket.
    pub calls: u64,
}

/// The durations of the timed calls of a row (none for entry-only functions).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DurationStats {
    /// Sum of the durations.
    pub sum_ns: u64,
    /// Shortest call.
    pub min_ns: u64,
    /// Longest call.
    pub max_ns: u64,
    /// Median, estimated from the histogram (within its bucket's width).
    pub p50_ns: u64,
    /// 99th percentile, estimated the same way.
    pub p99_ns: u64,
    /// The non-empty buckets, shortest first.
    pub buckets: Vec<DurationBucket>,
}

/// One (process, function, result) over one interval.
#[derive(Debug, Clone, PartialEq)]
pub struct CudaStatsRow {
    /// End of the interval, nanoseconds since the Unix epoch.
    pub time_ns: i64,
    /// Length of the interval.
    pub interval_ns: u64,
    /// Process (thread group) id.
    pub pid: i32,
    /// Name of the thread that made the process's first such call in the interval.
    pub comm: String,
    /// CUDA function.
    pub function: String,
    /// CUresult (0 for entry-only functions, whose result is not seen).
    pub result: u32,
    /// Its name (`CUDA_SUCCESS`, ..., `NOT_CAPTURED`).
    pub result_name: String,
    /// Calls.
    pub calls: u64,
    /// Sum of the byte-count argument, for functions that have one.
    pub bytes_sum: Option<u64>,
    /// Durations; `None` for entry-only functions.
    pub durations: Option<DurationStats>,
    /// The container and pod of the process, when it runs in one.
    pub workload: Option<Arc<Workload>>,
    /// The share of the interval in which the function was probed in this process (1.0
    /// unless the overhead budget probed it part of the time).
    pub observed_fraction: f64,
}

impl CudaStatsRow {
    /// `calls` scaled to the whole interval: `calls / observed_fraction`, rounded.
    pub fn calls_estimated(&self) -> u64 {
        estimate(self.calls, self.observed_fraction)
    }

    /// `bytes_sum` scaled the same way.
    pub fn bytes_estimated(&self) -> Option<u64> {
        self.bytes_sum
            .map(|bytes| estimate(bytes, self.observed_fraction))
    }
}

/// `observed / fraction`, rounded, saturating; `observed` itself for a fraction that is not in
/// (0, 1) (a fully observed interval, or a value that cannot scale).
fn estimate(observed: u64, fraction: f64) -> u64 {
    if fraction > 0.0 && fraction < 1.0 {
        let scaled = (observed as f64 / fraction).round();
        if scaled >= u64::MAX as f64 {
            u64::MAX
        } else {
            scaled as u64
        }
    } else {
        observed
    }
}

fn bucket_fields() -> Fields {
    Fields::from(vec![
        Field::new("from_ns", DataType::UInt64, false),
        Field::new("to_ns", DataType::UInt64, false),
        Field::new("calls", DataType::UInt64, false),
    ])
}

fn buckets_type() -> DataType {
    DataType::List(Arc::new(Field::new(
        "item",
        DataType::Struct(bucket_fields()),
        false,
    )))
}

/// The Arrow schema of the `cuda_stats` table.
pub fn schema() -> Arc<Schema> {
    let mut fields = common_fields();
    fields.extend([
        Field::new("interval_ns", DataType::UInt64, false),
        Field::new("pid", DataType::Int32, false),
        Field::new("comm", DataType::Utf8, false),
        Field::new("function", DataType::Utf8, false),
        Field::new("result", DataType::UInt32, false),
        Field::new("result_name", DataType::Utf8, false),
        Field::new("calls", DataType::UInt64, false),
        Field::new("bytes_sum", DataType::UInt64, true),
        Field::new("duration_sum_ns", DataType::UInt64, true),
        Field::new("duration_min_ns", DataType::UInt64, true),
        Field::new("duration_max_ns", DataType::UInt64, true),
        Field::new("duration_p50_ns", DataType::UInt64, true),
        Field::new("duration_p99_ns", DataType::UInt64, true),
        Field::new("duration_buckets", buckets_type(), true),
        Field::new("observed_fraction", DataType::Float64, true),
        Field::new("calls_estimated", DataType::UInt64, true),
        Field::new("bytes_estimated", DataType::UInt64, true),
    ]);
    fields.extend(workload_fields());
    super::with_metadata(EventKind::CudaStats, fields)
}

/// Accumulates [`CudaStatsRow`]s into a `cuda_stats` [`RecordBatch`](arrow_array::RecordBatch).
pub type CudaStatsBatchBuilder = RowBatchBuilder<CudaStatsRow>;

impl KindRows for CudaStatsRow {
    const TYPICAL_ROWS: usize = 64;
    const SCHEMA: fn() -> Arc<Schema> = schema;

    fn time_and_workload(&self) -> (i64, Option<&Workload>) {
        (self.time_ns, self.workload.as_deref())
    }

    fn columns(rows: &[Self]) -> Vec<ArrayRef> {
        let u64s = |f: &dyn Fn(&CudaStatsRow) -> Option<u64>| -> ArrayRef {
            Arc::new(UInt64Array::from_iter(rows.iter().map(f)))
        };
        let text = |f: &dyn Fn(&CudaStatsRow) -> &str| -> ArrayRef {
            Arc::new(StringArray::from_iter_values(rows.iter().map(f)))
        };
        let durations = |f: &dyn Fn(&DurationStats) -> u64| -> ArrayRef {
            u64s(&|r| r.durations.as_ref().map(f))
        };
        vec![
            u64s(&|r| Some(r.interval_ns)),
            Arc::new(Int32Array::from_iter_values(rows.iter().map(|r| r.pid))),
            text(&|r| &r.comm),
            text(&|r| &r.function),
            Arc::new(UInt32Array::from_iter_values(rows.iter().map(|r| r.result))),
            text(&|r| &r.result_name),
            u64s(&|r| Some(r.calls)),
            u64s(&|r| r.bytes_sum),
            durations(&|d| d.sum_ns),
            durations(&|d| d.min_ns),
            durations(&|d| d.max_ns),
            durations(&|d| d.p50_ns),
            durations(&|d| d.p99_ns),
            buckets_column(rows),
            Arc::new(Float64Array::from_iter_values(
                rows.iter().map(|r| r.observed_fraction),
            )),
            u64s(&|r| Some(r.calls_estimated())),
            u64s(&|r| r.bytes_estimated()),
        ]
    }
}

fn buckets_column(rows: &[CudaStatsRow]) -> ArrayRef {
    let fields = bucket_fields();
    let entry = StructBuilder::from_fields(fields.clone(), 0);
    let mut list = ListBuilder::new(entry).with_field(Arc::new(Field::new(
        "item",
        DataType::Struct(fields),
        false,
    )));
    for row in rows {
        let Some(durations) = &row.durations else {
            list.append_null();
            continue;
        };
        let entries = list.values();
        for bucket in &durations.buckets {
            for (index, value) in [bucket.from_ns, bucket.to_ns, bucket.calls]
                .into_iter()
                .enumerate()
            {
                if let Some(field) = entries.field_builder::<UInt64Builder>(index) {
                    field.append_value(value);
                }
            }
            entries.append(true);
        }
        list.append(true);
    }
    Arc::new(list.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::HostIdentity;
    use arrow_array::cast::AsArray;
    use arrow_array::types::UInt64Type;
    use arrow_array::Array;

    fn row(durations: Option<DurationStats>) -> CudaStatsRow {
        CudaStatsRow {
            time_ns: 1_795_319_010_000_000_000,
            interval_ns: 10_000_000_000,
            pid: 7,
            comm: "python3".into(),
            function: "cuLaunchKernel".into(),
            result: 0,
            result_name: "CUDA_SUCCESS".into(),
            calls: u64::MAX,
            bytes_sum: None,
            durations,
            workload: None,
            observed_fraction: 1.0,
        }
    }

    #[test]
    fn estimates_scale_by_the_observed_fraction_and_saturate() {
        let mut sampled = row(None);
        sampled.calls = 1_001;
        sampled.bytes_sum = Some(3);
        sampled.observed_fraction = 0.1;
        assert_eq!(sampled.calls_estimated(), 10_010);
        assert_eq!(sampled.bytes_estimated(), Some(30));
        sampled.calls = u64::MAX;
        assert_eq!(sampled.calls_estimated(), u64::MAX);
        for fraction in [1.0, 0.0, -0.5, f64::NAN, 1.5] {
            sampled.observed_fraction = fraction;
            sampled.calls = 17;
            assert_eq!(sampled.calls_estimated(), 17, "fraction {fraction}");
        }
    }

    #[test]
    fn rows_land_in_their_columns_with_their_buckets() {
        let mut builder = CudaStatsBatchBuilder::new(HostIdentity {
            host: "h".into(),
            boot_id: "b".into(),
        });
        builder.append(row(Some(DurationStats {
            sum_ns: 5_000,
            min_ns: 70,
            max_ns: u64::MAX,
            p50_ns: 75,
            p99_ns: 4_000,
            buckets: vec![
                DurationBucket {
                    from_ns: 64,
                    to_ns: 80,
                    calls: 3,
                },
                DurationBucket {
                    from_ns: 412_316_860_416,
                    to_ns: u64::MAX,
                    calls: 1,
                },
            ],
        })));
        builder.append(row(None));
        let batch = builder.finish().unwrap();
        assert_eq!(batch.num_rows(), 2);
        assert_eq!(batch.num_columns(), schema().fields().len());
        let u64s = |name: &str| {
            batch
                .column_by_name(name)
                .unwrap()
                .as_primitive::<UInt64Type>()
                .clone()
        };
        assert_eq!(u64s("calls").value(0), u64::MAX);
        assert_eq!(u64s("duration_max_ns").value(0), u64::MAX);
        assert_eq!(u64s("duration_p50_ns").value(0), 75);
        assert!(
            u64s("duration_sum_ns").is_null(1),
            "entry-only: no durations"
        );
        assert!(u64s("bytes_sum").is_null(0));
        let buckets = batch
            .column_by_name("duration_buckets")
            .unwrap()
            .as_list::<i32>();
        assert!(buckets.is_null(1));
        let first = buckets.value(0);
        let first = first.as_struct();
        assert_eq!(first.len(), 2);
        let column = |i: usize| {
            first
                .column(i)
                .as_primitive::<UInt64Type>()
                .values()
                .to_vec()
        };
        assert_eq!(column(0), [64, 412_316_860_416]);
        assert_eq!(column(1), [80, u64::MAX]);
        assert_eq!(column(2), [3, 1]);
        // The builder starts over.
        assert_eq!(builder.finish().unwrap().num_rows(), 0);
    }
}
