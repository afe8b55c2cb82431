//! The roll-up's sums, limits and names.

use super::*;
use crate::views::cuda_stats::{cuda_stats, CudaStats};
use crate::views::fixtures::{stats_batch, stats_row};
use crate::views::histogram::Durations;
use crate::views::report::functions::per_function;

const SECOND: i64 = 1_000_000_000;

fn rolled_up(batches: &[RecordBatch]) -> RecordBatch {
    let mut rollup = HostRollup::new(batches[0].schema());
    for batch in batches {
        rollup.add(batch).unwrap();
    }
    rollup.drain().unwrap().expect("rows")
}

fn column_u64(batch: &RecordBatch, name: &str) -> Vec<Option<u64>> {
    u64_column(batch, name).unwrap().iter().collect()
}

/// An hour of one process: 3 intervals of launches (one sampled at half), entry-only
/// calls, a failed allocation, and another process's launches.
fn hour() -> Vec<RecordBatch> {
    let launch = |t: i64, calls, buckets: &[(u64, u64, u64)]| {
        stats_row(t * SECOND, "cuLaunchKernel", calls, buckets)
    };
    let mut sampled = launch(30, 4, &[(1_024, 1_280, 4)]);
    sampled.observed_fraction = 0.5;
    sampled.bytes_sum = Some(10);
    let mut entry_only = stats_row(20 * SECOND, "cuLaunchKernelEx", 7, &[]);
    entry_only.result_name = "NOT_CAPTURED".into();
    let mut failed = stats_row(20 * SECOND, "cuMemAlloc_v2", 2, &[(4_096, 5_120, 2)]);
    (failed.result, failed.result_name) = (2, "CUDA_ERROR_OUT_OF_MEMORY".into());
    let mut other = launch(20, 9, &[(896, 1_024, 9)]);
    (other.pid, other.comm) = (200, "eval".into());
    let mut renamed = launch(20, 2, &[(896, 1_024, 1), (1_024, 1_280, 1)]);
    renamed.comm = "worker".into();
    vec![
        stats_batch(&[launch(10, 3, &[(896, 1_024, 3)]), entry_only, other]),
        stats_batch(&[renamed, failed, sampled]),
    ]
}

#[test]
fn an_hour_of_intervals_adds_up_to_one_row_per_process_function_and_result() {
    let batches = hour();
    let rolled = rolled_up(&batches);
    let rows = cuda_stats(std::slice::from_ref(&rolled));
    let launches: Vec<&CudaStats> = rows
        .iter()
        .filter(|r| r.function == "cuLaunchKernel" && r.pid == 100)
        .collect();
    assert_eq!(rows.len(), 4, "{rows:#?}");
    let launch = launches[0];
    assert_eq!(launches.len(), 1);
    assert_eq!(launch.calls, 3 + 2 + 4);
    assert_eq!(launch.time_ns, 30 * SECOND, "the last interval's end");
    assert_eq!(launch.interval_ns, 30_000_000_000);
    assert_eq!(launch.comm, "train", "the first row's");
    assert_eq!(launch.bytes_sum, Some(10));
    assert_eq!(
        launch
            .buckets
            .iter()
            .map(|b| (b.from_ns, b.to_ns, b.calls))
            .collect::<Vec<_>>(),
        [(896, 1_024, 4), (1_024, 1_280, 5)]
    );
    assert_eq!(launch.duration_min_ns, Some(896));
    assert_eq!(launch.duration_max_ns, Some(1_279));
    assert_eq!(
        launch.duration_sum_ns,
        Some(3 * 896 + 896 + 1_024 + 4 * 1_024)
    );
    // The sampled interval's 4 calls stand for 8.
    let launch_row = rows.iter().position(|r| std::ptr::eq(r, launch)).unwrap();
    assert_eq!(column_u64(&rolled, "calls_estimated")[launch_row], Some(13));
    let fraction = rolled
        .column_by_name("observed_fraction")
        .unwrap()
        .as_primitive::<arrow_array::types::Float64Type>()
        .value(launch_row);
    assert_eq!(fraction, 9.0 / 13.0);
    // 9 calls, 4 in [896, 1024) and 5 in [1024, 1280): rank 4.5 and 8.91 fall in the second
    // bucket, interpolated (1024 + 0.1 * 256 and 1024 + 0.982 * 256), as the report reads
    // the same histogram.
    let mut durations = Durations::default();
    launch.add_durations_to(&mut durations);
    let p50_p99 = [0.5, 0.99].map(|q| durations.quantile(q));
    assert_eq!(p50_p99, [Some(1_049), Some(1_275)]);
    assert_eq!(
        ["duration_p50_ns", "duration_p99_ns"].map(|c| column_u64(&rolled, c)[launch_row]),
        p50_p99
    );

    let entry_only = rows
        .iter()
        .find(|r| r.function == "cuLaunchKernelEx")
        .unwrap();
    assert_eq!((entry_only.calls, entry_only.buckets.len()), (7, 0));
    assert_eq!(entry_only.duration_sum_ns, None);
    let failed = rows.iter().find(|r| r.result == 2).unwrap();
    assert_eq!(
        (failed.calls, failed.result_name.as_str()),
        (2, "CUDA_ERROR_OUT_OF_MEMORY")
    );
    let other = rows.iter().find(|r| r.pid == 200).unwrap();
    assert_eq!((other.calls, other.comm.as_str()), (9, "eval"));
    assert_eq!(
        rolled.schema(),
        batches[0].schema(),
        "the table's own schema"
    );
}

#[test]
fn the_report_counts_the_same_from_the_rollup_as_from_the_intervals() {
    let batches = hour();
    let raw = cuda_stats(&batches);
    let rolled = cuda_stats(&[rolled_up(&batches)]);
    assert_eq!(
        per_function(&[], &rolled, 3_600.0),
        per_function(&[], &raw, 3_600.0)
    );
}

#[test]
fn sums_saturate_at_the_limit_and_a_drained_rollup_starts_empty() {
    let huge = stats_row(
        SECOND,
        "cuMemcpyHtoD_v2",
        u64::MAX,
        &[(1, u64::MAX, u64::MAX)],
    );
    let batch = stats_batch(&[huge.clone(), huge]);
    let mut rollup = HostRollup::new(batch.schema());
    rollup.add(&batch).unwrap();
    assert_eq!(rollup.rows_in(), 2);
    let rows = cuda_stats(&[rollup.drain().unwrap().unwrap()]);
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].calls, u64::MAX);
    assert_eq!(rows[0].buckets[0].calls, u64::MAX);
    assert_eq!(rows[0].duration_sum_ns, Some(u64::MAX));
    assert_eq!(rollup.drain().unwrap(), None);
    assert_eq!(rollup.rows_in(), 0);
}

#[test]
fn only_cuda_stats_hours_have_a_rollup_folder_and_names_are_checked() {
    assert_eq!(
        rollup_folder("cuda_stats/dt=2026-11-28/hour=03").as_deref(),
        Some("cuda_stats_hourly/dt=2026-11-28/hour=03")
    );
    assert_eq!(rollup_folder("cuda/dt=2026-11-28/hour=03"), None);
    assert_eq!(
        rollup_folder("cuda_stats_hourly/dt=2026-11-28/hour=03"),
        None
    );
    assert!(is_rollup(&rollup_name("r1", 0)));
    for bad in [
        "rollup-.parquet",
        "rollup-a/../b.parquet",
        "rollup-a.parquet#1",
        "compact-a.parquet",
    ] {
        assert!(!is_rollup(bad), "{bad}");
    }
}
