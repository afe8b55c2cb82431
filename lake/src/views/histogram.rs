//! Call durations merged from the two places the lake keeps them, for quantiles and means over
//! many rows: single calls (`cuda` rows, each an exact duration) and the histograms of
//! `cuda_stats` rows (`duration_buckets`: calls per `[from_ns, to_ns)`, with the exact sum,
//! minimum and maximum of the row).
//!
//! A single call counts in a *point* bucket chosen by the caller (the report groups durations
//! by the way it writes them, so a quantile of calls only is the nearest-rank duration the page
//! would show with every call in memory). A `cuda_stats` bucket counts as the range it covers;
//! buckets of several rows with the same bounds add up. A quantile walks every bucket in order
//! of its lower bound and, in a range bucket, interpolates within it and keeps the result
//! within the exact extremes, as the agent does for one row
//! (`agent/sources/stats_histogram.rs`, `quantile`). Counts are `u128`: rows of hostile
//! or huge `calls` add up without overflow.
//!
//! It only counts; which rows count (and how often) is the caller's to decide.

use std::collections::BTreeMap;

/// Durations of many calls, as points and ranges.
#[derive(Debug, Clone, Default)]
pub struct Durations {
    /// Calls per point bucket.
    points: foldhash::HashMap<u64, u128>,
    /// Calls per `(from_ns, to_ns)` range bucket.
    ranges: BTreeMap<(u64, u64), u128>,
    /// Shortest and longest duration seen (single calls, rows' `duration_min_ns`/`_max_ns`).
    min_ns: Option<u64>,
    max_ns: Option<u64>,
    /// Sum of the durations and how many calls it covers, for the mean.
    sum_ns: u128,
    summed: u128,
}

impl Durations {
    /// One call of `duration_ns`, counted in the point bucket `bucket_ns`.
    pub fn add_call(&mut self, bucket_ns: u64, duration_ns: u64) {
        self.add_points(bucket_ns, 1);
        self.add_exact(duration_ns);
    }

    /// `calls` calls in the point bucket `bucket_ns`, whose durations the caller adds to the
    /// extremes and the mean with [`Durations::add_exact`] (a caller that counts calls per
    /// bucket itself adds the counts once).
    pub fn add_points(&mut self, bucket_ns: u64, calls: u128) {
        if calls > 0 {
            *self.points.entry(bucket_ns).or_default() += calls;
        }
    }

    /// One call's exact duration, for the extremes and the mean only (its bucket is counted by
    /// [`Durations::add_points`]).
    pub fn add_exact(&mut self, duration_ns: u64) {
        self.extremes(Some(duration_ns), Some(duration_ns));
        self.sum_ns += u128::from(duration_ns);
        self.summed += 1;
    }

    /// The histogram of one `cuda_stats` row: its buckets `(from_ns, to_ns, calls)`, its exact
    /// extremes, and the sum of its `calls` durations (each `None` where the row has none).
    pub fn add_row(
        &mut self,
        buckets: impl IntoIterator<Item = (u64, u64, u64)>,
        (min_ns, max_ns): (Option<u64>, Option<u64>),
        sum_ns: Option<u64>,
        calls: u64,
    ) {
        for (from, to, count) in buckets {
            if count > 0 {
                *self.ranges.entry((from, to)).or_default() += u128::from(count);
            }
        }
        self.extremes(min_ns, max_ns);
        if let Some(sum) = sum_ns {
            self.sum_ns += u128::from(sum);
            self.summed += u128::from(calls);
        }
    }

    fn extremes(&mut self, min_ns: Option<u64>, max_ns: Option<u64>) {
        if let Some(min) = min_ns {
            self.min_ns = Some(self.min_ns.map_or(min, |m| m.min(min)));
        }
        if let Some(max) = max_ns {
            self.max_ns = Some(self.max_ns.map_or(max, |m| m.max(max)));
        }
    }

    /// Mean duration (the sum over the calls it covers, rounded down); `None` without any.
    pub fn mean(&self) -> Option<u64> {
        if self.summed == 0 {
            return None;
        }
        Some(u64::try_from(self.sum_ns / self.summed).unwrap_or(u64::MAX))
    }

    /// The `q` quantile (0 < q <= 1); `None` without durations. Only points: nearest rank,
    /// the point bucket of the rank-th call. With ranges: interpolated within the bucket of
    /// the rank and kept within the exact extremes.
    pub fn quantile(&self, q: f64) -> Option<u64> {
        let mut buckets: Vec<(u64, u64, u128)> = self
            .points
            .iter()
            .map(|(&at, &n)| (at, at, n))
            .chain(self.ranges.iter().map(|(&(from, to), &n)| (from, to, n)))
            .filter(|&(_, _, n)| n > 0)
            .collect();
        buckets.sort_unstable();
        let total: u128 = buckets.iter().map(|&(_, _, n)| n).sum();
        if total == 0 {
            return None;
        }
        let (min, max) = (self.min_ns.unwrap_or(0), self.max_ns.unwrap_or(u64::MAX));
        // Hostile rows may have min > max: then nothing is clamped.
        let clamp = !self.ranges.is_empty() && min <= max;
        let rank = (q * total as f64).max(1.0);
        let mut before = 0u128;
        for &(from, to, count) in &buckets {
            if ((before + count) as f64) < rank {
                before += count;
                continue;
            }
            let estimate = if from >= to {
                from
            } else {
                let low = if clamp { from.max(min) } else { from };
                let high = if clamp {
                    to.min(max.saturating_add(1)).max(low)
                } else {
                    to
                };
                let fraction = (rank - before as f64) / count as f64;
                // Float to integer saturates: no overflow at the type's limits.
                (low as f64 + fraction * (high - low) as f64) as u64
            };
            return Some(if clamp {
                estimate.clamp(min, max)
            } else {
                estimate
            });
        }
        // Rounding of a huge total can leave the rank past the last bucket.
        buckets.last().map(|&(from, to, _)| {
            let last = if from >= to { from } else { to - 1 };
            if clamp {
                last.clamp(min, max)
            } else {
                last
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of_calls(values: impl IntoIterator<Item = u64>) -> Durations {
        let mut durations = Durations::default();
        for v in values {
            durations.add_call(v, v);
        }
        durations
    }

    #[test]
    fn single_calls_give_the_nearest_rank_and_the_exact_mean() {
        let hundred = of_calls(1..=100);
        assert_eq!(hundred.quantile(0.5), Some(50));
        assert_eq!(hundred.quantile(0.99), Some(99));
        assert_eq!(hundred.quantile(1.0), Some(100));
        assert_eq!(hundred.quantile(0.001), Some(1));
        assert_eq!(hundred.mean(), Some(50), "5050 / 100, rounded down");
        assert_eq!(of_calls([7]).quantile(0.99), Some(7));
        let none = Durations::default();
        assert_eq!((none.quantile(0.5), none.mean()), (None, None));
        // The point bucket, not the exact duration, is what a quantile gives.
        let mut grouped = Durations::default();
        grouped.add_call(12_300, 12_345);
        grouped.add_call(12_300, 12_301);
        assert_eq!(grouped.quantile(0.5), Some(12_300));
        assert_eq!(grouped.mean(), Some(12_323));
    }

    /// The agent's quantile of one row (histogram.rs) on the same buckets, by hand: 100 calls
    /// in [896, 1024) and one in [983040, 1048576), min 1,000, max 1,000,000.
    #[test]
    fn a_rows_histogram_interpolates_within_the_bucket_and_the_extremes() {
        let mut one = Durations::default();
        one.add_row(
            [(896, 1_024, 100), (983_040, 1_048_576, 1)],
            (Some(1_000), Some(1_000_000)),
            Some(1_100_000),
            101,
        );
        // rank 50.5 of 101: bucket [max(896, 1000), 1024) = [1000, 1024), 50.5/100 of 24.
        assert_eq!(one.quantile(0.5), Some(1_012));
        // rank 99.99: 1000 + 0.9999 * 24 = 1023.99.
        assert_eq!(one.quantile(0.99), Some(1_023));
        // rank 101: the last bucket, cut at max + 1: 983040 + 1.0 * (1000001 - 983040).
        assert_eq!(one.quantile(1.0), Some(1_000_000));
        assert_eq!(one.mean(), Some(10_891), "1,100,000 / 101");
    }

    #[test]
    fn rows_merge_by_bucket_bounds() {
        let mut merged = Durations::default();
        // Two rows of 10 calls in [1024, 1280) and 10 in [2048, 2560).
        merged.add_row(
            [(1_024, 1_280, 10)],
            (Some(1_100), Some(1_200)),
            Some(11_500),
            10,
        );
        merged.add_row(
            [(1_024, 1_280, 10), (2_048, 2_560, 10)],
            (Some(1_050), Some(2_500)),
            Some(10_600 + 22_000),
            20,
        );
        // 30 calls: rank 15 is the 15th of 20 in [1050, 1280): 1050 + 15/20 * 230.
        assert_eq!(merged.quantile(0.5), Some(1_222));
        // rank 29.7: 9.7/10 of [2048, 2501): 2048 + 0.97 * 453 = 2487.41.
        assert_eq!(merged.quantile(0.99), Some(2_487));
        assert_eq!(merged.mean(), Some(1_470), "44,100 / 30");
    }

    #[test]
    fn points_and_ranges_walk_together_in_order() {
        let mut mixed = Durations::default();
        mixed.add_row(
            [(1_024, 1_280, 3)],
            (Some(1_024), Some(1_279)),
            Some(3_300),
            3,
        );
        // A slow call as a single row: after the range.
        mixed.add_call(20_000_000, 20_000_000);
        assert_eq!(
            mixed.quantile(0.5),
            Some(1_194),
            "rank 2 of 4: 1024 + 2/3 * 256"
        );
        assert_eq!(mixed.quantile(0.99), Some(20_000_000));
        assert_eq!(mixed.mean(), Some(5_000_825));
    }

    #[test]
    fn hostile_values_neither_overflow_nor_panic() {
        let mut huge = Durations::default();
        for _ in 0..3 {
            huge.add_row(
                [(0, 64, u64::MAX), (412_316_860_416, u64::MAX, u64::MAX)],
                (Some(0), Some(u64::MAX)),
                Some(u64::MAX),
                u64::MAX,
            );
        }
        assert_eq!(huge.quantile(0.25), Some(32));
        let high = huge.quantile(0.99).unwrap();
        assert!(high >= 412_316_860_416, "{high}");
        assert_eq!(huge.quantile(1.0), Some(u64::MAX));
        assert_eq!(huge.mean(), Some(1));
        // Extremes that contradict each other: no clamp, no panic.
        let mut odd = Durations::default();
        odd.add_row([(100, 200, 1)], (Some(u64::MAX), Some(0)), None, 1);
        assert_eq!(odd.quantile(0.5), Some(200));
        assert_eq!(odd.mean(), None, "no sum: no mean");
        // An empty or zero bucket counts nothing.
        let mut empty = Durations::default();
        empty.add_row([(100, 200, 0)], (None, None), Some(0), 0);
        assert_eq!((empty.quantile(0.5), empty.mean()), (None, None));
        let mut inverted = Durations::default();
        inverted.add_row([(500, 100, 2)], (None, None), None, 2);
        assert_eq!(inverted.quantile(0.5), Some(500));
    }

    proptest::proptest! {
        /// Whatever rows and calls hold, a quantile is found without a panic, and with
        /// consistent extremes it lies within them.
        #[test]
        fn any_durations_give_a_quantile_within_the_extremes(
            rows in proptest::collection::vec(
                (proptest::collection::vec((0u64.., 0u64.., 0u64..), 0..4), 0u64.., 0u64.., 0u64..),
                0..5,
            ),
            calls in proptest::collection::vec(0u64.., 0..5),
            q in 0.000_001f64..=1.0,
        ) {
            let mut durations = Durations::default();
            for (buckets, a, b, sum) in &rows {
                durations.add_row(buckets.iter().copied(), (Some(*a.min(b)), Some(*a.max(b))), Some(*sum), 1);
            }
            for &ns in &calls {
                durations.add_call(ns, ns);
            }
            let (quantile, _) = (durations.quantile(q), durations.mean());
            if let (Some(value), Some(min), Some(max)) = (quantile, durations.min_ns, durations.max_ns) {
                if !durations.ranges.is_empty() {
                    proptest::prop_assert!(min <= value && value <= max, "{value} not in [{min}, {max}]");
                }
            }
        }
    }
}
