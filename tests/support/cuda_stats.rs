//! `cuda_stats` rows read back from the lake, the checks every statistics test makes, and the
//! agent config of the stats-mode tests (tests/cuda_stats.rs, tests/cuda_stats_peers.rs).

use std::collections::BTreeMap;

use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, UInt32Type, UInt64Type};
use arrow_array::{Array, RecordBatch};

use super::Fixtures;

/// One `cuda_stats` row, as read back.
#[derive(Debug, Clone)]
pub struct StatsRow {
    pub pid: i32,
    pub function: String,
    pub result: u32,
    pub result_name: String,
    pub interval_ns: u64,
    pub calls: u64,
    pub bytes_sum: Option<u64>,
    pub durations: Option<Durations>,
}

/// The duration columns of a row.
#[derive(Debug, Clone)]
pub struct Durations {
    pub sum: u64,
    pub min: u64,
    pub max: u64,
    pub p50: u64,
    pub p99: u64,
    /// (from_ns, to_ns, calls) of each bucket.
    pub buckets: Vec<(u64, u64, u64)>,
}

pub fn stats_rows(batches: &[RecordBatch]) -> Vec<StatsRow> {
    let mut out = Vec::new();
    for batch in batches {
        let u64s = |name: &str| batch[name].as_primitive::<UInt64Type>().clone();
        let text = |name: &str| batch[name].as_string::<i32>().clone();
        let (function, result_name) = (text("function"), text("result_name"));
        let pid = batch["pid"].as_primitive::<Int32Type>().clone();
        let result = batch["result"].as_primitive::<UInt32Type>().clone();
        let (interval, calls, bytes) = (u64s("interval_ns"), u64s("calls"), u64s("bytes_sum"));
        let (sum, min, max) = (
            u64s("duration_sum_ns"),
            u64s("duration_min_ns"),
            u64s("duration_max_ns"),
        );
        let (p50, p99) = (u64s("duration_p50_ns"), u64s("duration_p99_ns"));
        let buckets = batch["duration_buckets"].as_list::<i32>().clone();
        for row in 0..batch.num_rows() {
            let durations = (!sum.is_null(row)).then(|| {
                let list = buckets.value(row);
                let list = list.as_struct();
                let column = |i: usize| list.column(i).as_primitive::<UInt64Type>().clone();
                let (from, to, n) = (column(0), column(1), column(2));
                let buckets = (0..list.len())
                    .map(|i| (from.value(i), to.value(i), n.value(i)))
                    .collect();
                Durations {
                    sum: sum.value(row),
                    min: min.value(row),
                    max: max.value(row),
                    p50: p50.value(row),
                    p99: p99.value(row),
                    buckets,
                }
            });
            out.push(StatsRow {
                pid: pid.value(row),
                function: function.value(row).to_string(),
                result: result.value(row),
                result_name: result_name.value(row).to_string(),
                interval_ns: interval.value(row),
                calls: calls.value(row),
                bytes_sum: (!bytes.is_null(row)).then(|| bytes.value(row)),
                durations,
            });
        }
    }
    out
}

/// Calls and bytes per (function, result name) of `pid`, over every interval.
pub fn totals(rows: &[StatsRow], pid: u32) -> BTreeMap<(String, String), (u64, Option<u64>)> {
    let mut totals = BTreeMap::new();
    for row in rows.iter().filter(|r| r.pid == pid as i32) {
        let entry = totals
            .entry((row.function.clone(), row.result_name.clone()))
            .or_insert((0, None));
        entry.0 += row.calls;
        if let Some(bytes) = row.bytes_sum {
            entry.1 = Some(entry.1.unwrap_or(0) + bytes);
        }
    }
    totals
}

/// Durations are consistent: the buckets hold every timed call, the extremes lie in the first
/// and last bucket, and min <= p50 <= p99 <= max, sum within [calls * min, calls * max].
pub fn assert_durations_consistent(row: &StatsRow) {
    let Some(Durations {
        sum,
        min,
        max,
        p50,
        p99,
        buckets,
    }) = &row.durations
    else {
        panic!("{row:?}: no durations")
    };
    let in_buckets: u64 = buckets.iter().map(|b| b.2).sum();
    assert_eq!(in_buckets, row.calls, "{row:?}");
    assert!(min <= p50 && p50 <= p99 && p99 <= max, "{row:?}");
    assert!(*min > 0, "{row:?}");
    assert!(
        *sum >= row.calls * min && *sum <= row.calls * max,
        "{row:?}"
    );
    let (first, last) = (buckets[0], buckets[buckets.len() - 1]);
    assert!(first.0 <= *min && *min < first.1, "{row:?}");
    assert!(last.0 <= *max && *max < last.1, "{row:?}");
    assert!(buckets.windows(2).all(|w| w[0].1 <= w[1].0), "{row:?}");
}

/// The stand-in library with launches, allocations and context syncs in `stats` mode, every
/// one with its return probe (`stats_entry_only = []`: durations and CUresults of launches
/// too), plus `extra` lines in `[sources.cuda]`.
pub fn stats_config(fixtures: &Fixtures, data: &std::path::Path, extra: &str) -> String {
    stats_config_fleet_default(fixtures, data, &format!("stats_entry_only = []\n{extra}"))
}

/// [`stats_config`] with `stats_entry_only` left at its default (launches entry-only).
pub fn stats_config_fleet_default(
    fixtures: &Fixtures,
    data: &std::path::Path,
    extra: &str,
) -> String {
    fixtures.cuda_config(data, r#"["default"]"#).replace(
        "stats = []\n",
        &format!("stats = [\"cuLaunchKernel*\", \"cuMemAlloc_v2\", \"cuCtxSynchronize\"]\n{extra}"),
    )
}
