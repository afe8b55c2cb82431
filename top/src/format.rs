//! Cells of the view as text: rates, durations, nanoseconds, UTC timestamps, and cutting a cell
//! to its column (with `…`, control characters escaped).

use std::time::Duration;

/// `text` with its control characters escaped, cut to `width` characters (the last one `…`
/// when cut): names and messages come from other users' processes and the kernel.
pub(super) fn cut(text: &str, width: usize) -> String {
    let text = crate::escape::escape_controls(text);
    if text.chars().count() <= width {
        return text.to_string();
    }
    let mut out: String = text.chars().take(width - 1).collect();
    out.push('…');
    out
}

/// A rate with one decimal, `-` when there is none yet.
pub(super) fn rate(value: Option<f64>) -> String {
    value.map_or("-".into(), |v| format!("{v:.1}"))
}

/// A duration in nanoseconds in the unit that reads best.
pub(super) fn nanos(ns: f64) -> String {
    match ns {
        n if n < 1e3 => format!("{n:.0}ns"),
        n if n < 1e6 => format!("{:.1}µs", n / 1e3),
        n if n < 1e9 => format!("{:.1}ms", n / 1e6),
        n => format!("{:.2}s", n / 1e9),
    }
}

/// An uptime: `H:MM:SS`, with days in front when there are any.
pub(super) fn duration(seconds: f64) -> String {
    let s = seconds.max(0.0) as u64;
    let (d, h, m, s) = (s / 86_400, s / 3600 % 24, s / 60 % 60, s % 60);
    if d > 0 {
        format!("{d}d{h:02}:{m:02}:{s:02}")
    } else {
        format!("{h}:{m:02}:{s:02}")
    }
}

/// The refresh interval as given: `200ms`, `2s`.
pub(super) fn interval(every: Duration) -> String {
    if every.subsec_millis() == 0 {
        format!("{}s", every.as_secs())
    } else {
        format!("{}ms", every.as_millis())
    }
}

/// `MM-DD HH:MM:SS` in UTC.
pub(super) fn timestamp(time_ns: i64) -> String {
    let secs = time_ns.div_euclid(1_000_000_000);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil date from days since 1970-01-01 (H. Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    format!(
        "{month:02}-{day:02} {:02}:{:02}:{:02}",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_read_as_a_person_expects() {
        assert_eq!(timestamp(0), "01-01 00:00:00");
        assert_eq!(timestamp(1_700_000_000_000_000_000), "11-14 22:13:20");
        assert_eq!(timestamp(951_782_400_000_000_000), "02-29 00:00:00");
        assert_eq!(nanos(724.0), "724ns");
        assert_eq!(nanos(1500.0), "1.5µs");
        assert_eq!(nanos(2_500_000.0), "2.5ms");
        assert_eq!(nanos(3e9), "3.00s");
        assert_eq!(duration(3723.0), "1:02:03");
        assert_eq!(duration(90_061.0), "1d01:01:01");
        assert_eq!(interval(Duration::from_millis(200)), "200ms");
        assert_eq!(interval(Duration::from_secs(2)), "2s");
        assert_eq!(rate(None), "-");
        assert_eq!(rate(Some(2.26)), "2.3");
        assert_eq!(cut("cuMemcpyHtoDAsync_v2_ptsz", 10), "cuMemcpyH…");
        assert_eq!(cut("short", 10), "short");
    }
}
