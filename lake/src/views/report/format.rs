//! Values to report text: HTML escaping for the timeline's hand-built SVG, and the way times,
//! durations and rates are written. Every string the data lake supplies that the timeline
//! writes goes through [`escape`]; the page around it (`html`) is maud markup, escaped by
//! construction the same way.

use std::fmt::Write as _;

/// `text` with `& < > " '` replaced by entities, safe inside elements and quoted attributes.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            // Control characters have no business in a report and can confuse terminals.
            c if c.is_control() && c != '\n' && c != '\t' => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

/// `2026-11-22 03:43:20.123 UTC`.
pub fn time(ns: i64) -> String {
    chrono::DateTime::from_timestamp_nanos(ns)
        .format("%Y-%m-%d %H:%M:%S%.3f UTC")
        .to_string()
}

/// `03:43:20.123`: an axis label.
pub fn clock(ns: i64) -> String {
    chrono::DateTime::from_timestamp_nanos(ns)
        .format("%H:%M:%S%.3f")
        .to_string()
}

/// A duration with a unit that keeps three significant digits readable: `850 ns`, `12.3 µs`,
/// `4.56 ms`, `1.20 s`.
pub fn duration(ns: u64) -> String {
    let mut out = String::new();
    write_duration(&mut out, ns);
    out
}

/// [`duration`], appended to `out`.
pub fn write_duration(out: &mut String, ns: u64) {
    let ns_f = ns as f64;
    let _ = match ns {
        0..=999 => write!(out, "{ns} ns"),
        1_000..=999_999 => write_significant(out, ns_f / 1e3, "µs"),
        1_000_000..=999_999_999 => write_significant(out, ns_f / 1e6, "ms"),
        _ => write_significant(out, ns_f / 1e9, "s"),
    };
}

/// Durations below this find their bucket in a table of every label's first value (about
/// 9,100 of them); longer ones, rare, search for it.
const TABLED_NS: u64 = 1_000_000_000_000;

/// The smallest duration that [`duration`] writes as it writes `ns`: the lower edge of the
/// bucket of durations the page cannot tell apart. Labels grow with the duration, so each is
/// one interval of durations, and this is a number to group by instead of a string per row.
pub fn duration_bucket(ns: u64) -> u64 {
    if let Some(index) = label_index(ns) {
        return label_start(index);
    }
    let label = duration(ns);
    // The last tabled label may go on past the table.
    let tabled = label_starts().last().copied().unwrap_or(0);
    let (mut low, mut high) = (tabled, ns);
    // The label of `high` is `label`; find the first one that is.
    while low < high {
        let mid = low + (high - low) / 2;
        if duration(mid) == label {
            high = mid;
        } else {
            low = mid + 1;
        }
    }
    high
}

/// Labels below [`TABLED_NS`]: how many there are ([`label_index`] is below it).
pub fn tabled_labels() -> usize {
    label_starts().len()
}

/// The place of `ns`'s label among the labels below [`TABLED_NS`], in ascending order (a dense
/// index to count calls by: [`label_start`] gives its bucket); `None` from [`TABLED_NS`] on.
/// Constant time: a table indexed by the duration's top ten bits gives a label at most a few
/// places before the right one (a slot is at most 1/512 of its value wide, a label at least
/// 1/1000), and the walk from there is short. Called once per CUDA call by the report.
pub fn label_index(ns: u64) -> Option<usize> {
    if ns >= TABLED_NS {
        return None;
    }
    let (starts, near) = (label_starts(), label_near());
    let mut index = near[coarse_slot(ns)] as usize;
    while index + 1 < starts.len() && starts[index + 1] <= ns {
        index += 1;
    }
    Some(index)
}

/// The first duration of the label at `index` ([`label_index`]).
pub fn label_start(index: usize) -> u64 {
    label_starts()[index]
}

/// `ns` reduced to its top ten bits and their position: below 1,024 the value itself, above it
/// `shift * 1024 + (ns >> shift)`, where the second part is in `[512, 1024)`.
fn coarse_slot(ns: u64) -> usize {
    let shift = (u64::BITS - ns.leading_zeros()).saturating_sub(10);
    ((shift as usize) << 10) | (ns >> shift) as usize
}

/// Per [`coarse_slot`] of a duration below [`TABLED_NS`]: the index of the label of the slot's
/// smallest duration.
fn label_near() -> &'static [u32] {
    static NEAR: std::sync::OnceLock<Vec<u32>> = std::sync::OnceLock::new();
    NEAR.get_or_init(|| {
        let starts = label_starts();
        let slots = coarse_slot(TABLED_NS - 1) + 1;
        (0..slots)
            .map(|slot| {
                let (shift, top) = (slot >> 10, (slot & 1023) as u64);
                let lowest = top << shift;
                let index = starts.partition_point(|&start| start <= lowest).max(1) - 1;
                u32::try_from(index).unwrap_or(u32::MAX)
            })
            .collect()
    })
}

/// The first duration of every label below [`TABLED_NS`], ascending.
fn label_starts() -> &'static [u64] {
    static STARTS: std::sync::OnceLock<Vec<u64>> = std::sync::OnceLock::new();
    STARTS.get_or_init(|| {
        let mut starts = vec![0];
        let mut start = 0;
        loop {
            start = next_label_start(start);
            if start >= TABLED_NS {
                return starts;
            }
            starts.push(start);
        }
    })
}

/// The first duration after `from` with another label than `from`'s.
fn next_label_start(from: u64) -> u64 {
    let label = duration(from);
    // Gallop to a duration with another label, then bisect between the two.
    let (mut same, mut step) = (from, 1u64);
    let mut other = from + 1;
    while duration(other) == label {
        same = other;
        step *= 2;
        other = from.saturating_add(step);
    }
    while other - same > 1 {
        let mid = same + (other - same) / 2;
        if duration(mid) == label {
            same = mid;
        } else {
            other = mid;
        }
    }
    other
}

fn write_significant(out: &mut String, value: f64, unit: &str) -> std::fmt::Result {
    if value >= 100.0 {
        write!(out, "{value:.0} {unit}")
    } else if value >= 10.0 {
        write!(out, "{value:.1} {unit}")
    } else {
        write!(out, "{value:.2} {unit}")
    }
}

/// A size in bytes, exact, with its binary-unit reading from 1 KiB on: `512 B`,
/// `3145728 B (3.00 MiB)`.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut value = n as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{n} B ({value:.2} {})", UNITS[unit])
}

/// Calls per second, three decimals (`0.003`, `120.500`).
pub fn rate(per_second: f64) -> String {
    format!("{per_second:.3}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markup_in_data_becomes_text() {
        assert_eq!(
            escape(r#"<script>alert("x")</script> & 'y'"#),
            "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &#39;y&#39;"
        );
        assert_eq!(escape("a\u{1b}[31mb"), "a\u{fffd}[31mb");
        assert_eq!(escape("plain µs"), "plain µs");
    }

    #[test]
    fn times_durations_and_rates_read_well() {
        assert_eq!(
            time(1_795_319_000_123_456_789),
            "2026-11-22 03:43:20.123 UTC"
        );
        assert_eq!(clock(1_795_319_000_123_456_789), "03:43:20.123");
        assert_eq!(duration(850), "850 ns");
        assert_eq!(duration(12_345), "12.3 µs");
        assert_eq!(duration(4_560_000), "4.56 ms");
        assert_eq!(duration(1_200_000_000), "1.20 s");
        assert_eq!(rate(2.0 / 600.0), "0.003");
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(3 << 20), "3145728 B (3.00 MiB)");
        assert_eq!(bytes(u64::MAX), "18446744073709551615 B (16.00 EiB)");
    }

    #[test]
    fn a_bucket_starts_at_the_first_duration_written_like_it() {
        let mut samples = vec![
            0, 1, 999, 1_000, 9_994, 9_995, 9_999, 10_000, 12_350, 12_351,
        ];
        samples.extend([999_499, 999_500, 999_999, 1_000_000, 1_234_567_890]);
        samples.extend([
            TABLED_NS - 1,
            TABLED_NS,
            TABLED_NS + 123_456_789_012,
            u64::MAX,
        ]);
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..2_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            samples.push(x >> (x % 40));
        }
        for ns in samples {
            let bucket = duration_bucket(ns);
            assert!(bucket <= ns, "{ns}");
            assert_eq!(duration(bucket), duration(ns), "{ns}");
            if bucket > 0 {
                assert_ne!(duration(bucket - 1), duration(ns), "{ns}: not the first");
            }
        }
        assert_eq!(duration_bucket(850), 850);
        assert_eq!(duration(duration_bucket(12_345)), "12.3 µs");
    }

    /// The constant-time index agrees with a search of the whole table at every label's
    /// edges and around every power of two (where the coarse slots change width).
    #[test]
    fn the_label_index_is_the_tabled_search() {
        let starts = label_starts();
        let searched = |ns: u64| starts.partition_point(|&start| start <= ns) - 1;
        let mut samples: Vec<u64> = Vec::new();
        for &start in starts {
            samples.extend([start.saturating_sub(1), start, start + 1]);
        }
        for bit in 0..40 {
            let power = 1u64 << bit;
            samples.extend([power - 1, power, power + 1]);
        }
        samples.push(TABLED_NS - 1);
        for ns in samples {
            assert_eq!(label_index(ns), Some(searched(ns)), "{ns}");
            assert_eq!(label_start(searched(ns)), duration_bucket(ns), "{ns}");
        }
        assert_eq!(label_index(TABLED_NS), None);
        assert_eq!(label_index(u64::MAX), None);
        assert_eq!(tabled_labels(), starts.len());
        assert_eq!(label_index(0), Some(0));
    }
}
