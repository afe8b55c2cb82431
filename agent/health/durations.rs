//! Call-duration histograms for `/metrics` and OTLP: 13 buckets whose bounds are powers of
//! four nanoseconds (1,024 ns to about 4.3 s, then the rest), chosen so that every bucket of
//! the kernel's finer stats-mode histogram (4 per octave, edges at every power of two from
//! 64 ns, `bpf/cuda.bpf.c`) falls inside exactly one of them: aggregated calls and rows land
//! in the same bucket a call of the same duration would, with no estimation.
//!
//! Buckets are half-open like the kernel's: a call of exactly a bound's duration counts in
//! the next bucket (Prometheus's `le` would count it in this one; the difference is one
//! nanosecond at thirteen points).

use crate::sources::stats_histogram::bucket_bounds;

/// Finite upper bounds in nanoseconds: 2^10, 2^12, ..., 2^32.
pub const BOUNDS_NS: [u64; 12] = {
    let mut bounds = [0u64; 12];
    let mut i = 0;
    while i < 12 {
        bounds[i] = 1 << (10 + 2 * i);
        i += 1;
    }
    bounds
};

/// Buckets, the last one open-ended.
pub const BUCKETS: usize = BOUNDS_NS.len() + 1;

/// Counts per duration bucket.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct DurationHistogram {
    /// Calls per bucket (not cumulative).
    pub counts: [u64; BUCKETS],
}

/// The bucket of a `ns`-long call.
#[inline]
pub fn bucket_of(ns: u64) -> usize {
    if ns < BOUNDS_NS[0] {
        return 0;
    }
    let log2 = 63 - ns.leading_zeros() as usize;
    ((log2 - 10) / 2 + 1).min(BUCKETS - 1)
}

impl DurationHistogram {
    /// Counts one call.
    #[inline]
    pub fn record(&mut self, ns: u64) {
        let slot = &mut self.counts[bucket_of(ns)];
        *slot = slot.saturating_add(1);
    }

    /// Adds the kernel's stats-mode bucket counts (`counts[i]` calls in kernel bucket `i`).
    pub fn add_kernel_buckets(&mut self, counts: impl IntoIterator<Item = u64>) {
        for (index, count) in counts.into_iter().enumerate().filter(|(_, c)| *c > 0) {
            let (from, _) = bucket_bounds(index);
            let slot = &mut self.counts[bucket_of(from)];
            *slot = slot.saturating_add(count);
        }
    }

    /// Adds another histogram.
    pub fn merge(&mut self, other: &DurationHistogram) {
        for (mine, theirs) in self.counts.iter_mut().zip(other.counts) {
            *mine = mine.saturating_add(theirs);
        }
    }

    /// Calls counted.
    pub fn total(&self) -> u64 {
        self.counts
            .iter()
            .fold(0u64, |sum, c| sum.saturating_add(*c))
    }

    /// `(upper bound in seconds, calls)` per bucket, the last bound infinite: the form
    /// Prometheus and OTLP histograms take (not cumulative).
    pub fn buckets_seconds(&self) -> [(f64, u64); BUCKETS] {
        let mut out = [(f64::INFINITY, 0); BUCKETS];
        for (i, slot) in out.iter_mut().enumerate() {
            let bound = BOUNDS_NS
                .get(i)
                .map_or(f64::INFINITY, |ns| *ns as f64 / 1e9);
            *slot = (bound, self.counts[i]);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources::stats_histogram::BUCKETS as KERNEL_BUCKETS;

    #[test]
    fn bounds_are_powers_of_four_from_1024_ns() {
        assert_eq!(BOUNDS_NS[0], 1024);
        assert_eq!(BOUNDS_NS[11], 1 << 32);
        for pair in BOUNDS_NS.windows(2) {
            assert_eq!(pair[1], pair[0] * 4);
        }
    }

    #[test]
    fn buckets_are_half_open_at_every_bound() {
        assert_eq!(bucket_of(0), 0);
        assert_eq!(bucket_of(1023), 0);
        for (i, bound) in BOUNDS_NS.iter().enumerate() {
            assert_eq!(bucket_of(bound - 1), i, "{bound}");
            assert_eq!(bucket_of(*bound), i + 1, "{bound}");
        }
        assert_eq!(bucket_of(u64::MAX), BUCKETS - 1);
    }

    #[test]
    fn every_kernel_bucket_falls_inside_one_bucket() {
        for index in 0..KERNEL_BUCKETS {
            let (from, to) = bucket_bounds(index);
            assert_eq!(bucket_of(from), bucket_of(to - 1), "kernel bucket {index}");
        }
    }

    #[test]
    fn kernel_buckets_land_where_rows_of_the_same_duration_do() {
        let mut rows = DurationHistogram::default();
        let kernel_counts = vec![2u64; KERNEL_BUCKETS];
        for index in 0..KERNEL_BUCKETS {
            let (from, _) = bucket_bounds(index);
            rows.record(from);
            rows.record(from);
        }
        let mut aggregated = DurationHistogram::default();
        aggregated.add_kernel_buckets(kernel_counts);
        assert_eq!(aggregated, rows);
        assert_eq!(aggregated.total(), 2 * KERNEL_BUCKETS as u64);
    }

    #[test]
    fn counts_saturate_instead_of_overflowing() {
        let mut histogram = DurationHistogram::default();
        histogram.add_kernel_buckets([u64::MAX, u64::MAX]);
        histogram.record(5);
        assert_eq!(histogram.counts[0], u64::MAX);
        assert_eq!(histogram.total(), u64::MAX);
        let seconds = histogram.buckets_seconds();
        assert_eq!(seconds[0], (1.024e-6, u64::MAX));
        assert_eq!(seconds[BUCKETS - 1].0, f64::INFINITY);
    }
}
