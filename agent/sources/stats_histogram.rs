//! The duration histogram of `stats` mode: the bounds of the buckets `bpf/cuda.bpf.c` fills
//! (layout in `gpuship_events.h`), and quantiles estimated from their counts.

use crate::bpf::cuda::types::gpuship_stats_layout;

/// Buckets of the kernel's duration histogram.
pub const BUCKETS: usize = gpuship_stats_layout::GPUSHIP_STATS_BUCKETS.0 as usize;
const FIRST_OCTAVE: u32 = gpuship_stats_layout::GPUSHIP_STATS_FIRST_OCTAVE.0;
const SUB_BUCKETS_LOG2: u32 = gpuship_stats_layout::GPUSHIP_STATS_SUB_BUCKETS_LOG2.0;

/// `[from, to)` of histogram bucket `index`, as `bpf/cuda.bpf.c` fills them (the last bucket
/// is open-ended: `to` is `u64::MAX`).
pub fn bucket_bounds(index: usize) -> (u64, u64) {
    if index == 0 {
        return (0, 1 << FIRST_OCTAVE);
    }
    let i = (index - 1) as u32;
    let octave = FIRST_OCTAVE + (i >> SUB_BUCKETS_LOG2);
    let sub = u64::from(i & ((1 << SUB_BUCKETS_LOG2) - 1));
    let width = 1u64 << (octave - SUB_BUCKETS_LOG2);
    let from = (1u64 << octave) + sub * width;
    let to = if index + 1 >= BUCKETS {
        u64::MAX
    } else {
        from + width
    };
    (from, to)
}

/// The `q` quantile (0 < q <= 1) of the durations in `counts` (per bucket), interpolated
/// within its bucket and kept within `[min, max]`, the exact extremes. None without calls.
pub fn quantile(counts: &[u64], q: f64, min: u64, max: u64) -> Option<u64> {
    let total: u64 = counts.iter().sum();
    if total == 0 {
        return None;
    }
    let rank = (q * total as f64).max(1.0);
    let mut before = 0u64;
    for (index, &count) in counts.iter().enumerate() {
        if count == 0 {
            continue;
        }
        if (before + count) as f64 >= rank {
            let (from, to) = bucket_bounds(index);
            let (from, to) = (from.max(min), to.min(max.saturating_add(1)).max(from));
            let fraction = (rank - before as f64) / count as f64;
            let estimate = from as f64 + fraction * (to - from) as f64;
            return Some((estimate as u64).clamp(min, max));
        }
        before += count;
    }
    Some(max)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bucket of `ns` as the BPF program computes it (duration_bucket in cuda.bpf.c).
    fn bpf_bucket(ns: u64) -> usize {
        if ns < 64 {
            return 0;
        }
        let octave = 63 - ns.leading_zeros();
        let sub = (ns >> (octave - 2)) & 3;
        let index = (((octave - 6) << 2) as u64 + sub + 1) as usize;
        index.min(BUCKETS - 1)
    }

    #[test]
    fn buckets_tile_the_durations_as_the_program_fills_them() {
        assert_eq!(bucket_bounds(0), (0, 64));
        assert_eq!(bucket_bounds(1), (64, 80));
        assert_eq!(bucket_bounds(4), (112, 128));
        assert_eq!(bucket_bounds(5), (128, 160));
        assert_eq!(bucket_bounds(BUCKETS - 1).1, u64::MAX);
        for index in 1..BUCKETS {
            assert_eq!(
                bucket_bounds(index - 1).1,
                bucket_bounds(index).0,
                "{index}"
            );
        }
        for ns in [
            0,
            1,
            63,
            64,
            79,
            80,
            127,
            128,
            1_000,
            999_999,
            1 << 37,
            u64::MAX,
        ] {
            let (from, to) = bucket_bounds(bpf_bucket(ns));
            assert!(
                from <= ns && (ns < to || to == u64::MAX),
                "{ns} in [{from}, {to})"
            );
        }
        // Every bucket is at most a quarter of its lower bound wide (bucket 0 aside).
        for index in 1..BUCKETS - 1 {
            let (from, to) = bucket_bounds(index);
            assert!((to - from) * 4 <= from, "{index}: [{from}, {to})");
        }
    }

    #[test]
    fn quantiles_come_from_the_histogram_within_the_exact_extremes() {
        let mut counts = vec![0u64; BUCKETS];
        assert_eq!(quantile(&counts, 0.5, 0, 0), None);
        // 100 calls of 1,000 ns (bucket [896, 1024)), one of 1 ms.
        counts[bpf_bucket(1_000)] = 100;
        counts[bpf_bucket(1_000_000)] = 1;
        let p50 = quantile(&counts, 0.50, 1_000, 1_000_000).unwrap();
        assert!((1_000..1_024).contains(&p50), "{p50}");
        let p99 = quantile(&counts, 0.99, 1_000, 1_000_000).unwrap();
        assert!((1_000..1_024).contains(&p99), "{p99}");
        assert_eq!(quantile(&counts, 1.0, 1_000, 1_000_000), Some(1_000_000));
        // One call: every quantile is that call.
        let mut one = vec![0u64; BUCKETS];
        one[bpf_bucket(5_000)] = 1;
        assert_eq!(quantile(&one, 0.5, 5_000, 5_000), Some(5_000));
        assert_eq!(quantile(&one, 0.99, 5_000, 5_000), Some(5_000));
        // At the type's limits: nothing overflows.
        let mut huge = vec![0u64; BUCKETS];
        huge[BUCKETS - 1] = u64::MAX / 2;
        let q = quantile(&huge, 0.99, 1 << 40, u64::MAX).unwrap();
        assert!(q >= 1 << 40, "{q}");
    }
}
