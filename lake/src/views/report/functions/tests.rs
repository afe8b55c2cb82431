//! Which calls count where, and the statistics they make.

use super::*;
use crate::views::cuda_stats::cuda_stats;
use crate::views::fixtures::{cuda_batch, cuda_row, recorded_batch, stats_batch, stats_row};
use crate::views::rows::cuda_calls;

fn find<'a>(stats: &'a [FunctionStats], function: &str) -> &'a FunctionStats {
    stats.iter().find(|s| s.function == function).unwrap()
}

#[test]
fn calls_alone_count_errors_rates_means_and_percentiles() {
    let calls = cuda_calls(&[cuda_batch(&[
        cuda_row(3_000, "cuCtxSynchronize", 700, 10),
        cuda_row(3_500, "cuCtxSynchronize", 0, 30),
        cuda_row(4_000, "cuLaunchKernel", 0, 0),
    ])]);
    let stats = per_function(&calls, &[], 10.0);
    let sync = find(&stats, "cuCtxSynchronize");
    assert_eq!((sync.calls, sync.errors, sync.per_second), (2, 1, 0.2));
    assert_eq!(
        (sync.mean_ns, sync.p50_ns, sync.p99_ns, sync.aggregated),
        (Some(20), Some(10), Some(30), 0)
    );
    let launch = find(&stats, "cuLaunchKernel");
    assert_eq!(
        (
            launch.entry_only,
            launch.errors,
            launch.p50_ns,
            launch.mean_ns
        ),
        (1, 0, None, None)
    );
}

/// The daemon's default: launches only as aggregates, over two intervals; quantiles from
/// the merged histogram (`histogram.rs` has the arithmetic).
#[test]
fn aggregates_alone_count_their_calls_with_merged_quantiles() {
    let mut entry_only = stats_row(20_000_000_000, "cuLaunchKernelEx", 4, &[]);
    entry_only.result_name = "NOT_CAPTURED".into();
    let stats = cuda_stats(&[stats_batch(&[
        stats_row(
            10_000_000_000,
            "cuLaunchKernel",
            5,
            &[(896, 1_024, 3), (1_024, 1_280, 2)],
        ),
        stats_row(20_000_000_000, "cuLaunchKernel", 5, &[(1_024, 1_280, 5)]),
        entry_only,
    ])]);
    let functions = per_function(&[], &stats, 100.0);
    let launch = find(&functions, "cuLaunchKernel");
    assert_eq!(
        (
            launch.calls,
            launch.aggregated,
            launch.errors,
            launch.per_second
        ),
        (10, 10, 0, 0.1)
    );
    // 10 calls, min 896, max 1,279: rank 5 is the 2nd of 7 in [1024, 1280), rank 9.9 the
    // 6.9th; the mean is (3 * 896 + 7 * 1,024) / 10.
    assert_eq!(
        (launch.mean_ns, launch.p50_ns, launch.p99_ns),
        (Some(985), Some(1_097), Some(1_276))
    );
    let ex = find(&functions, "cuLaunchKernelEx");
    assert_eq!((ex.calls, ex.entry_only, ex.aggregated), (4, 4, 4));
    assert_eq!((ex.mean_ns, ex.p50_ns), (None, None));
    assert_eq!(functions[0].function, "cuLaunchKernel", "most called first");
}

/// A slow successful call is a row and in the aggregate: counted once, from the aggregate.
/// A failed call is a row and in a failing aggregate: counted once, from the row.
#[test]
fn a_call_that_is_both_a_row_and_aggregated_counts_once() {
    let mut failing = stats_row(10_000_000_000, "cuLaunchKernel", 1, &[(640, 768, 1)]);
    failing.result = 700;
    failing.result_name = "CUDA_ERROR_ILLEGAL_ADDRESS".into();
    let stats = cuda_stats(&[stats_batch(&[
        stats_row(
            10_000_000_000,
            "cuLaunchKernel",
            4,
            &[(896, 1_024, 3), (16_777_216, 20_971_520, 1)],
        ),
        failing,
        stats_row(10_000_000_000, "cuMemcpyAsync", 2, &[(64, 80, 2)]),
    ])]);
    let mut calls = cuda_calls(&[cuda_batch(&[
        cuda_row(9_000_000_000, "cuLaunchKernel", 0, 20_000_000),
        cuda_row(9_500_000_000, "cuLaunchKernel", 700, 700),
        cuda_row(9_600_000_000, "cuMemcpyAsync", 0, 40_000_000),
        cuda_row(9_700_000_000, "cuMemcpyAsync", 0, 300),
        cuda_row(9_800_000_000, "cuMemcpyAsync", 0, 400),
    ])]);
    // Another process, and the same pid on another host: not aggregated, rows count.
    calls[3].pid = 200;
    calls[4].host = "node-b".into();
    let functions = per_function(&calls, &stats, 10.0);
    let launch = find(&functions, "cuLaunchKernel");
    assert_eq!(
        (launch.calls, launch.errors, launch.aggregated),
        (5, 1, 4),
        "4 aggregated (the slow one among them) and the failed row"
    );
    // Durations: 700 (the failed row), 3 in [896, 1024), 1 in [16777216, 20971520);
    // rank 2.5 is the 1.5th of 3 in [896, 1024); rank 4.95 is 0.95 into the last bucket.
    assert_eq!(
        (launch.mean_ns, launch.p50_ns, launch.p99_ns),
        (Some(3_356_120), Some(960), Some(20_761_804))
    );
    let copy = find(&functions, "cuMemcpyAsync");
    assert_eq!((copy.calls, copy.aggregated, copy.errors), (4, 2, 0));
    // 64..80 twice (rank 2 ends that bucket: 80), then 300 and 400.
    assert_eq!((copy.p50_ns, copy.p99_ns), (Some(80), Some(400)));
}

/// The flight recorder's copies count nowhere: not the aggregated launches', not the
/// failed call's, not those of a function no other row has.
#[test]
fn flight_recorder_copies_are_not_calls() {
    let stats = cuda_stats(&[stats_batch(&[stats_row(
        10_000_000_000,
        "cuLaunchKernel",
        4,
        &[(896, 1_024, 4)],
    )])]);
    let failed = cuda_row(9_500_000_000, "cuCtxSynchronize", 700, 700);
    let mut calls = cuda_calls(&[cuda_batch(&[failed])]);
    calls.extend(cuda_calls(&[recorded_batch(
        &[
            cuda_row(9_000_000_000, "cuLaunchKernel", 0, 900),
            cuda_row(9_100_000_000, "cuLaunchKernel", 700, 900),
            cuda_row(9_200_000_000, "cuModuleLoadData", 0, 5_000),
            failed,
        ],
        "node-a/pid/100/9500000000",
    )]));
    let functions = per_function(&calls, &stats, 10.0);
    let seen: Vec<(&str, u64, u64, u64)> = functions
        .iter()
        .map(|f| (f.function.as_str(), f.calls, f.errors, f.aggregated))
        .collect();
    assert_eq!(
        seen,
        [("cuLaunchKernel", 4, 0, 4), ("cuCtxSynchronize", 1, 1, 0)]
    );
    let sync = find(&functions, "cuCtxSynchronize");
    assert_eq!((sync.mean_ns, sync.p99_ns), (Some(700), Some(700)));
    // The aggregate's 4 calls alone in [896, 1024): rank 2 halfway, rank 3.96 at 126.72.
    let launch = find(&functions, "cuLaunchKernel");
    assert_eq!((launch.p50_ns, launch.p99_ns), (Some(960), Some(1_022)));
}

#[test]
fn hostile_counts_saturate_instead_of_overflowing() {
    let mut rows = Vec::new();
    for _ in 0..2 {
        let mut row = stats_row(10_000_000_000, "cuLaunchKernel", u64::MAX, &[]);
        row.durations = Some(gpuship_sinks::schema::DurationStats {
            sum_ns: u64::MAX,
            min_ns: 0,
            max_ns: u64::MAX,
            p50_ns: 0,
            p99_ns: 0,
            buckets: vec![gpuship_sinks::schema::DurationBucket {
                from_ns: 64,
                to_ns: 80,
                calls: u64::MAX,
            }],
        });
        rows.push(row);
    }
    let stats = cuda_stats(&[stats_batch(&rows)]);
    let calls = cuda_calls(&[cuda_batch(&[cuda_row(1, "cuLaunchKernel", 2, u64::MAX)])]);
    let functions = per_function(&calls, &stats, 100.0);
    let launch = find(&functions, "cuLaunchKernel");
    assert_eq!(
        (launch.calls, launch.aggregated, launch.errors),
        (u64::MAX, u64::MAX, 1)
    );
    assert_eq!(launch.per_second, u64::MAX as f64 / 100.0);
    assert_eq!((launch.p50_ns, launch.p99_ns), (Some(72), Some(79)));
    assert_eq!(
        launch.mean_ns,
        Some(1),
        "(3 * u64::MAX) / (2 * u64::MAX + 1)"
    );
}
