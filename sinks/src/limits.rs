//! The documented range of every size and duration in a sink's config, and arithmetic on such
//! values that cannot overflow.
//!
//! Validation rejects values outside their range (with the key and line), but the arithmetic
//! here must not panic or wrap even for a value that never went through validation: a config
//! built in code, or a range widened later.

use std::time::{Duration, Instant};

/// Longest wait any deadline is pushed to: far beyond any configured duration, far below the
/// point where the monotonic clock's arithmetic overflows.
pub const MAX_WAIT: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// `"<value> is outside <lo>..=<hi>"` when `value` is out of `range` (the event model's, which
/// checks the object-store settings with it).
pub use gpuship_model::out_of_range;

/// `start + wait`, with `wait` capped at [`MAX_WAIT`] and the sum at the latest representable
/// instant: a deadline that never overflows (`Instant + Duration` panics when it would).
pub fn instant_after(start: Instant, wait: Duration) -> Instant {
    let wait = wait.min(MAX_WAIT);
    start
        .checked_add(wait)
        .or_else(|| start.checked_add(wait / 2))
        .unwrap_or(start)
}

/// A duration in nanoseconds as an `i64` (the unit of row timestamps), saturating at
/// `i64::MAX` instead of wrapping to a negative value.
pub fn nanos_i64(duration: Duration) -> i64 {
    i64::try_from(duration.as_nanos()).unwrap_or(i64::MAX)
}

/// Seconds as milliseconds, saturating (`u64::MAX` seconds is not a number of milliseconds).
pub fn secs_to_millis(secs: u64) -> u64 {
    secs.saturating_mul(1000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_name_the_value_and_the_bounds() {
        assert_eq!(out_of_range(5u64, 1..=10), None);
        assert_eq!(out_of_range(1u64, 1..=10), None);
        assert_eq!(out_of_range(10u64, 1..=10), None);
        assert_eq!(
            out_of_range(u64::MAX, 1..=10).as_deref(),
            Some("18446744073709551615 is outside 1..=10")
        );
        assert_eq!(
            out_of_range(0usize, 1..=10).as_deref(),
            Some("0 is outside 1..=10")
        );
    }

    #[test]
    fn huge_waits_saturate_instead_of_panicking() {
        let now = Instant::now();
        let far = instant_after(now, Duration::from_secs(u64::MAX));
        assert_eq!(far, now + MAX_WAIT);
        assert_eq!(instant_after(now, Duration::MAX), now + MAX_WAIT);
        assert_eq!(
            instant_after(now, Duration::from_secs(3)),
            now + Duration::from_secs(3)
        );
    }

    #[test]
    fn huge_durations_saturate_in_nanoseconds_and_milliseconds() {
        assert_eq!(nanos_i64(Duration::from_secs(u64::MAX)), i64::MAX);
        // The wrap the issue saw: 2^64-1 s in ns as i64 was a small or negative number.
        assert!(nanos_i64(Duration::from_secs(18_446_744_073_709_551_615)) > 0);
        assert_eq!(nanos_i64(Duration::from_secs(10)), 10_000_000_000);
        assert_eq!(secs_to_millis(u64::MAX), u64::MAX);
        assert_eq!(secs_to_millis(30), 30_000);
    }
}
