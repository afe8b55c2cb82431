//! CUDA call statistics per function for the report, from both places calls are kept: `cuda`
//! rows (one per call) and `cuda_stats` rows (stats mode: calls added up per process, function
//! and result per interval). Every call counts once:
//!
//! - For a (host, pid, function) with `cuda_stats` rows, its **successful** calls, their
//!   durations and its entry-only calls come from the aggregates only, and its **failed** calls
//!   from its `cuda` rows only. In stats mode the kernel adds every call to the aggregate and
//!   also sends the failed and the slow ones as rows: a slow successful call is in both, and is
//!   counted from the aggregate; a failed one is in both, and is counted from its row (which
//!   has its arguments and incident), as the agent's run summary counts them.
//! - Every other (host, pid, function) counts its `cuda` rows, as before stats mode.
//!
//! Durations: mean over the calls with a duration; p50/p99 nearest rank over single calls,
//! interpolated within the aggregates' histogram buckets for aggregated calls
//! ([`Durations`]). Entry-only calls have no duration and are left out of them.
//!
//! Rows of the flight recorder (`flight_recorder = true`) count nowhere here: they are copies,
//! written when an incident started, of calls already counted (in the aggregates, or as rows).
//! The incident views show them.
//!
//! Every `cuda_stats` row must be added before the first `cuda` row: the rows decide which
//! `cuda` rows the aggregates already count.

use std::collections::BTreeSet;

use super::format;
use crate::views::cuda_stats::{CudaStats, StatsRow};
use crate::views::histogram::Durations;
use crate::views::rows::CudaCall;

/// Call statistics of one CUDA function.
#[derive(Debug, Clone, PartialEq)]
pub struct FunctionStats {
    /// Exported symbol.
    pub function: String,
    /// Calls in the range.
    pub calls: u64,
    /// Calls per second over the whole range.
    pub per_second: f64,
    /// Calls that returned an error.
    pub errors: u64,
    /// Mean duration (calls with a duration only).
    pub mean_ns: Option<u64>,
    /// Median duration.
    pub p50_ns: Option<u64>,
    /// 99th percentile duration.
    pub p99_ns: Option<u64>,
    /// Calls recorded at entry only (no duration).
    pub entry_only: u64,
    /// Calls counted from `cuda_stats` aggregates (0: every call is a `cuda` row).
    pub aggregated: u64,
}

/// One function's counts so far.
#[derive(Debug, Clone, Default)]
struct Counts {
    calls: u64,
    errors: u64,
    entry_only: u64,
    aggregated: u64,
    durations: Durations,
}

/// How the successful calls of one (host, pid, function) count, and where its function's
/// counts are once it has some.
#[derive(Debug, Clone, Copy)]
pub struct CallKey {
    aggregated: bool,
    slot: Option<usize>,
}

/// Per-function counts of `cuda_stats` and `cuda` rows, each call once (module doc).
#[derive(Debug, Clone, Default)]
pub struct Tally {
    /// function -> its place in `counts`.
    slots: foldhash::HashMap<String, usize>,
    /// Per function, in the order first seen.
    counts: Vec<(String, Counts)>,
    /// function -> host -> pids with `cuda_stats` rows: their successful `cuda` rows are
    /// already counted by the aggregates.
    aggregated: foldhash::HashMap<String, foldhash::HashMap<String, foldhash::HashSet<i32>>>,
    /// Hosts that wrote a counted row.
    pub hosts: BTreeSet<String>,
    /// Flight-recorder rows seen (and not counted as calls).
    pub flight_recorded: u64,
}

/// `map`'s entry for `key`, inserted with its default when missing: looked up by reference
/// first, so a name is copied once per key, not once per row (a fleet's day has hundreds of
/// millions of rows).
fn entry<'m, V: Default>(map: &'m mut foldhash::HashMap<String, V>, key: &str) -> &'m mut V {
    if !map.contains_key(key) {
        map.insert(key.to_string(), V::default());
    }
    map.get_mut(key).expect("inserted just above")
}

impl Tally {
    /// Functions counted so far.
    pub fn functions_seen(&self) -> usize {
        self.counts.len()
    }

    fn slot(&mut self, function: &str) -> usize {
        if let Some(&slot) = self.slots.get(function) {
            return slot;
        }
        self.counts.push((function.to_string(), Counts::default()));
        self.slots
            .insert(function.to_string(), self.counts.len() - 1);
        self.counts.len() - 1
    }

    fn counts(&mut self, function: &str) -> &mut Counts {
        let slot = self.slot(function);
        &mut self.counts[slot].1
    }

    /// How the calls of `pid` on `host` to `function` count ([`Tally::add_call_as`]): looked up
    /// once per process and function of a batch instead of once per row.
    pub fn call_key(&self, host: &str, pid: i32, function: &str) -> CallKey {
        CallKey {
            aggregated: !self.aggregated.is_empty() && self.is_aggregated(host, pid, function),
            slot: self.slots.get(function).copied(),
        }
    }

    /// Adds one `cuda_stats` row. Failed aggregates count nothing: each failed call is a
    /// `cuda` row, counted there.
    pub fn add_stats(&mut self, row: &StatsRow<'_>) {
        entry(entry(&mut self.aggregated, row.function), row.host).insert(row.pid);
        if !row.host.is_empty() && !self.hosts.contains(row.host) {
            self.hosts.insert(row.host.to_string());
        }
        if row.failed() {
            return;
        }
        let counts = self.counts(row.function);
        counts.calls = counts.calls.saturating_add(row.calls);
        counts.aggregated = counts.aggregated.saturating_add(row.calls);
        if row.entry_only() {
            counts.entry_only = counts.entry_only.saturating_add(row.calls);
        } else {
            row.add_durations_to(&mut counts.durations);
        }
    }

    /// Whether the aggregates count the successful calls of `pid` on `host` to `function`.
    fn is_aggregated(&self, host: &str, pid: i32, function: &str) -> bool {
        self.aggregated
            .get(function)
            .and_then(|hosts| hosts.get(host))
            .is_some_and(|pids| pids.contains(&pid))
    }

    /// Adds one `cuda` row: a call of `function` by `pid` on `host` (the host is added to
    /// [`Tally::hosts`] by the caller) that returned `result` after `duration_ns`, or was
    /// recorded at entry only.
    pub fn add_call(
        &mut self,
        (host, pid): (&str, i32),
        function: &str,
        duration_ns: u64,
        result: u32,
        entry_only: bool,
    ) {
        let mut key = self.call_key(host, pid, function);
        self.add_call_as(&mut key, function, duration_ns, result, entry_only);
    }

    /// [`Tally::add_call`] with the call's [`CallKey`] (from [`Tally::call_key`] for the same
    /// host, pid and function), which learns the function's place when it first counts.
    pub fn add_call_as(
        &mut self,
        key: &mut CallKey,
        function: &str,
        duration_ns: u64,
        result: u32,
        entry_only: bool,
    ) {
        let failed = result != 0 && !entry_only;
        if !failed && key.aggregated {
            return;
        }
        let slot = *key.slot.get_or_insert_with(|| self.slot(function));
        let counts = &mut self.counts[slot].1;
        counts.calls = counts.calls.saturating_add(1);
        if entry_only {
            counts.entry_only += 1;
            return;
        }
        if failed {
            counts.errors += 1;
        }
        counts
            .durations
            .add_call(format::duration_bucket(duration_ns), duration_ns);
    }

    /// The statistics per function over a range of `seconds`, most called first.
    pub fn finish(self, seconds: f64) -> Vec<FunctionStats> {
        let mut stats: Vec<FunctionStats> = self
            .counts
            .into_iter()
            .map(|(function, counts)| FunctionStats {
                calls: counts.calls,
                per_second: if seconds > 0.0 {
                    counts.calls as f64 / seconds
                } else {
                    0.0
                },
                errors: counts.errors,
                mean_ns: counts.durations.mean(),
                p50_ns: counts.durations.quantile(0.50),
                p99_ns: counts.durations.quantile(0.99),
                entry_only: counts.entry_only,
                aggregated: counts.aggregated,
                function,
            })
            .collect();
        stats.sort_by(|a, b| b.calls.cmp(&a.calls).then(a.function.cmp(&b.function)));
        stats
    }
}

/// Statistics per function of `stats` and `calls`, over a range of `seconds`; most called
/// first.
pub fn per_function(calls: &[CudaCall], stats: &[CudaStats], seconds: f64) -> Vec<FunctionStats> {
    let mut tally = Tally::default();
    for row in stats {
        tally.add_stats(&row.as_row());
    }
    for call in calls {
        if call.flight_recorder {
            tally.flight_recorded = tally.flight_recorded.saturating_add(1);
            continue;
        }
        tally.add_call(
            (&call.host, call.pid),
            &call.function,
            call.duration_ns,
            call.result,
            call.entry_only(),
        );
    }
    tally.finish(seconds)
}

#[cfg(test)]
mod tests {
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
}
