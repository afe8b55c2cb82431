//! Converts kernel timestamps to Unix time.
//!
//! BPF stamps events with `bpf_ktime_get_boot_ns` (CLOCK_BOOTTIME) and /dev/kmsg with the
//! kernel's local clock in microseconds, which drifts from CLOCK_MONOTONIC (the kernel-log
//! source measures and adds that drift: `sources/kmsg/clock.rs`). Both are turned into
//! nanoseconds since the Unix epoch by adding the offset to CLOCK_REALTIME measured at start.

/// Offsets from the kernel's clocks to Unix time, measured once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Clocks {
    boot_to_unix_ns: i64,
    monotonic_to_unix_ns: i64,
}

/// `clock` now, in nanoseconds (0 if it cannot be read).
pub fn now_ns(clock: libc::clockid_t) -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; clock_gettime only writes to it.
    let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
    if rc != 0 {
        return 0;
    }
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}

impl Clocks {
    /// Measures the offsets now.
    pub fn measure() -> Self {
        let realtime = now_ns(libc::CLOCK_REALTIME);
        let boot = now_ns(libc::CLOCK_BOOTTIME);
        let monotonic = now_ns(libc::CLOCK_MONOTONIC);
        Self {
            boot_to_unix_ns: realtime - boot,
            monotonic_to_unix_ns: realtime - monotonic,
        }
    }

    /// Fixed offsets, for tests and benchmarks.
    pub fn fixed(boot_to_unix_ns: i64, monotonic_to_unix_ns: i64) -> Self {
        Self {
            boot_to_unix_ns,
            monotonic_to_unix_ns,
        }
    }

    /// Unix nanoseconds for a CLOCK_BOOTTIME timestamp from BPF.
    #[inline]
    pub fn boot_to_unix_ns(&self, boot_ns: u64) -> i64 {
        // Past i64::MAX (a corrupt record) saturates; `as` would wrap to before 1970.
        i64::try_from(boot_ns)
            .unwrap_or(i64::MAX)
            .saturating_add(self.boot_to_unix_ns)
    }

    /// Unix nanoseconds for a /dev/kmsg timestamp (microseconds since boot).
    pub fn kmsg_to_unix_ns(&self, timestamp_us: u64) -> i64 {
        i64::try_from(timestamp_us)
            .unwrap_or(i64::MAX)
            .saturating_mul(1_000)
            .saturating_add(self.monotonic_to_unix_ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measured_offsets_map_now_to_now() {
        let clocks = Clocks::measure();
        let unix_now = now_ns(libc::CLOCK_REALTIME);
        let from_boot = clocks.boot_to_unix_ns(now_ns(libc::CLOCK_BOOTTIME) as u64);
        assert!(
            (from_boot - unix_now).abs() < 1_000_000_000,
            "{from_boot} vs {unix_now}"
        );
        let from_mono = clocks.kmsg_to_unix_ns(now_ns(libc::CLOCK_MONOTONIC) as u64 / 1_000);
        assert!((from_mono - unix_now).abs() < 1_000_000_000);
    }

    #[test]
    fn fixed_offsets_are_added() {
        let clocks = Clocks::fixed(100, 7);
        assert_eq!(clocks.boot_to_unix_ns(5), 105);
        assert_eq!(clocks.kmsg_to_unix_ns(2), 2_007);
    }
}
