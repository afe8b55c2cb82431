//! The kernel log's clock against CLOCK_MONOTONIC. /dev/kmsg stamps records with the kernel's
//! local clock (sched_clock), which is not NTP-disciplined: it drifts from CLOCK_MONOTONIC by
//! the clock's frequency error, seen here at 8 ms after 4.4 hours of uptime and reaching
//! seconds after weeks. Converted as if it were CLOCK_MONOTONIC, an XID from the kernel log
//! would be placed that much before (or after) the CUDA calls and driver operations that BPF
//! stamped around it.
//!
//! Every record read live (the reader had caught up with the log before it was written, so it
//! is read within a poll wake-up of being logged) gives `read time - record time` = the clock
//! offset plus the read's latency. The smallest of these over the last minutes is the offset,
//! to within the quickest read's latency (microseconds); older samples are dropped, so the
//! estimate follows the drift. Until the first live record (the backlog read at start) the
//! offset is taken as 0, as the kernel's own `dmesg -T` does.

use std::collections::VecDeque;

/// How long a sample counts: the drift moves by well under a millisecond in this time.
const WINDOW_US: u64 = 10 * 60 * 1_000_000;
/// At most this many samples are kept (a chatty log); the oldest go first.
const MAX_SAMPLES: usize = 4_096;

/// The running estimate of `CLOCK_MONOTONIC - kernel log clock`.
#[derive(Debug, Default)]
pub struct KmsgClock {
    /// (read time on CLOCK_MONOTONIC, read time - record time), both in microseconds.
    samples: VecDeque<(u64, i64)>,
}

impl KmsgClock {
    /// Notes a record stamped `record_us` that was read live at `read_us` (CLOCK_MONOTONIC).
    pub fn observe(&mut self, read_us: u64, record_us: u64) {
        let lag = i64::try_from(read_us)
            .unwrap_or(i64::MAX)
            .saturating_sub(i64::try_from(record_us).unwrap_or(i64::MAX));
        while self
            .samples
            .front()
            .is_some_and(|&(at, _)| read_us.saturating_sub(at) > WINDOW_US)
            || self.samples.len() >= MAX_SAMPLES
        {
            self.samples.pop_front();
        }
        self.samples.push_back((read_us, lag));
    }

    /// What to add to a record's time to put it on CLOCK_MONOTONIC, in nanoseconds.
    pub fn offset_ns(&self) -> i64 {
        self.samples
            .iter()
            .map(|&(_, lag)| lag)
            .min()
            .unwrap_or(0)
            .saturating_mul(1_000)
    }
}

/// CLOCK_MONOTONIC now, in microseconds.
pub fn monotonic_now_us() -> u64 {
    u64::try_from(crate::enrich::now_ns(libc::CLOCK_MONOTONIC)).unwrap_or(0) / 1_000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_quickest_read_of_the_window_is_the_offset() {
        let mut clock = KmsgClock::default();
        assert_eq!(clock.offset_ns(), 0, "no live record yet: no correction");
        clock.observe(1_000_000_000, 999_991_000); // read 9 ms after its stamp
        clock.observe(1_000_500_000, 1_000_491_950); // 8.05 ms: the quickest
        clock.observe(1_001_000_000, 1_000_990_000); // 10 ms
        assert_eq!(clock.offset_ns(), 8_050_000);
        // Ten minutes on, the old samples no longer count: the drift has moved.
        clock.observe(
            1_000_500_000 + WINDOW_US + 1,
            1_000_500_000 + WINDOW_US + 1 - 8_400,
        );
        clock.observe(
            1_001_000_000 + WINDOW_US + 1,
            1_001_000_000 + WINDOW_US + 1 - 8_300,
        );
        assert_eq!(clock.offset_ns(), 8_300_000);
    }

    #[test]
    fn a_log_clock_ahead_of_monotonic_and_values_at_the_limits_do_not_overflow() {
        let mut clock = KmsgClock::default();
        clock.observe(5_000, 7_000);
        assert_eq!(
            clock.offset_ns(),
            -2_000_000,
            "the log clock runs ahead: subtract"
        );
        let mut clock = KmsgClock::default();
        clock.observe(0, u64::MAX);
        assert_eq!(clock.offset_ns(), i64::MIN, "saturates");
        // Read at the end of time: the sample at 0 is out of the window, this one saturates.
        clock.observe(u64::MAX, 0);
        assert_eq!(clock.offset_ns(), i64::MAX);
        let mut full = KmsgClock::default();
        for i in 0..(MAX_SAMPLES as u64 + 10) {
            full.observe(1_000 + i, 1_000 + i);
        }
        assert_eq!(full.samples.len(), MAX_SAMPLES);
        assert_eq!(full.offset_ns(), 0);
    }
}
