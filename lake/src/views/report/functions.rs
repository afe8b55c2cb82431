//! CUDA call statistics per function for the report: calls, calls per second over the range,
//! errors, and duration percentiles (nearest rank; entry-only calls have no duration and are
//! left out of them).

use std::collections::BTreeMap;

use crate::views::rows::CudaCall;

/// Call statistics of one CUDA function.
#[derive(Debug, Clone, PartialEq)]
pub struct FunctionStats {
    /// Exported symbol.
    pub function: String,
    /// Calls in the range.
    pub calls: usize,
    /// Calls per second over the whole range.
    pub per_second: f64,
    /// Calls that returned an error.
    pub errors: usize,
    /// Median duration (calls with a duration only).
    pub p50_ns: Option<u64>,
    /// 99th percentile duration.
    pub p99_ns: Option<u64>,
    /// Calls recorded at entry only (no duration).
    pub entry_only: usize,
}

/// Nearest-rank percentile of sorted values.
pub fn percentile(sorted: &[u64], p: f64) -> Option<u64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (p * sorted.len() as f64).ceil() as usize;
    sorted.get(rank.clamp(1, sorted.len()) - 1).copied()
}

/// Nearest-rank percentile of a histogram: `(lowest value, count)` per bucket, buckets
/// disjoint and sorted by value; the lowest value of the bucket holding the rank.
pub fn percentile_of_buckets(buckets: &[(u64, u64)], p: f64) -> Option<u64> {
    let total: u64 = buckets.iter().map(|(_, n)| n).sum();
    if total == 0 {
        return None;
    }
    let rank = ((p * total as f64).ceil() as u64).clamp(1, total);
    let mut seen = 0;
    for &(low, count) in buckets {
        seen += count;
        if seen >= rank {
            return Some(low);
        }
    }
    buckets.last().map(|(low, _)| *low)
}

/// Statistics per function of `calls`, over a range of `seconds`; most called first.
pub fn per_function(calls: &[CudaCall], seconds: f64) -> Vec<FunctionStats> {
    let mut by_function: BTreeMap<&str, (Vec<u64>, usize, usize, usize)> = BTreeMap::new();
    for call in calls {
        let entry = by_function.entry(call.function.as_str()).or_default();
        entry.1 += 1;
        if call.failed() {
            entry.2 += 1;
        }
        if call.entry_only() {
            entry.3 += 1;
        } else {
            entry.0.push(call.duration_ns);
        }
    }
    let mut stats: Vec<FunctionStats> = by_function
        .into_iter()
        .map(|(function, (mut durations, calls, errors, entry_only))| {
            durations.sort_unstable();
            FunctionStats {
                function: function.to_string(),
                calls,
                per_second: if seconds > 0.0 {
                    calls as f64 / seconds
                } else {
                    0.0
                },
                errors,
                p50_ns: percentile(&durations, 0.50),
                p99_ns: percentile(&durations, 0.99),
                entry_only,
            }
        })
        .collect();
    stats.sort_by(|a, b| b.calls.cmp(&a.calls).then(a.function.cmp(&b.function)));
    stats
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::views::fixtures::{cuda_batch, cuda_row};
    use crate::views::rows::cuda_calls;

    #[test]
    fn percentiles_use_the_nearest_rank() {
        let values: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&values, 0.5), Some(50));
        assert_eq!(percentile(&values, 0.99), Some(99));
        assert_eq!(percentile(&[7], 0.99), Some(7));
        assert_eq!(percentile(&[], 0.5), None);
    }

    #[test]
    fn bucket_percentiles_pick_the_bucket_of_the_rank() {
        assert_eq!(percentile_of_buckets(&[], 0.5), None);
        let buckets = [(10, 1), (30, 1)];
        assert_eq!(percentile_of_buckets(&buckets, 0.5), Some(10));
        assert_eq!(percentile_of_buckets(&buckets, 0.99), Some(30));
        let values: Vec<u64> = (1..=100).collect();
        let ones: Vec<(u64, u64)> = values.iter().map(|v| (*v, 1)).collect();
        for p in [0.01, 0.5, 0.99, 1.0] {
            assert_eq!(
                percentile_of_buckets(&ones, p),
                percentile(&values, p),
                "{p}"
            );
        }
    }

    #[test]
    fn counts_errors_rates_and_percentiles_per_function() {
        let calls = cuda_calls(&[cuda_batch(&[
            cuda_row(3_000, "cuCtxSynchronize", 700, 10),
            cuda_row(3_500, "cuCtxSynchronize", 0, 30),
            cuda_row(4_000, "cuLaunchKernel", 0, 0),
        ])]);
        let stats = per_function(&calls, 10.0);
        let sync = stats
            .iter()
            .find(|s| s.function == "cuCtxSynchronize")
            .unwrap();
        assert_eq!((sync.calls, sync.errors, sync.per_second), (2, 1, 0.2));
        assert_eq!((sync.p50_ns, sync.p99_ns), (Some(10), Some(30)));
        let launch = stats
            .iter()
            .find(|s| s.function == "cuLaunchKernel")
            .unwrap();
        assert_eq!(
            (launch.entry_only, launch.errors, launch.p50_ns),
            (1, 0, None)
        );
    }
}
