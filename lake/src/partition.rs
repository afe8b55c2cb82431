//! Hive partitions of the lake's keys (`<kind>/dt=YYYY-MM-DD/hour=HH/...`): which folders to
//! list for a range, and which files can hold no row of it, decided from the key alone so that
//! those files are never fetched.

use chrono::{DateTime, Duration, NaiveDate, Utc};

use super::range::TimeRange;

/// Past this many days, one listing of the whole table is cheaper than one per day.
const MAX_DAY_LISTINGS: i64 = 62;

/// The folders under which every file of `table` for `range` lies.
pub fn prefixes(table: &str, range: &TimeRange) -> Vec<String> {
    let first = range.since().date_naive();
    // `until` is exclusive: an end at midnight does not need the next day.
    let last = (range.until() - Duration::microseconds(1)).date_naive();
    let days = (last - first).num_days();
    if !(0..MAX_DAY_LISTINGS).contains(&days) {
        return vec![format!("{table}/")];
    }
    first
        .iter_days()
        .take(days as usize + 1)
        .map(|day| format!("{table}/dt={}/", day.format("%Y-%m-%d")))
        .collect()
}

/// The span of event time a key's `dt=`/`hour=` folders promise, if the key has them.
pub fn span_of(key: &str) -> Option<(DateTime<Utc>, DateTime<Utc>)> {
    let mut date = None;
    let mut hour = None;
    for part in key.split('/') {
        if let Some(value) = part.strip_prefix("dt=") {
            date = NaiveDate::parse_from_str(value, "%Y-%m-%d").ok();
        } else if let Some(value) = part.strip_prefix("hour=") {
            hour = value.parse::<u32>().ok().filter(|h| *h < 24);
        }
    }
    let start = date?.and_hms_opt(0, 0, 0)?.and_utc();
    Some(match hour {
        Some(hour) => {
            let start = start + Duration::hours(i64::from(hour));
            (start, start + Duration::hours(1))
        }
        None => (start, start + Duration::days(1)),
    })
}

/// False only when the key's partitions prove it holds no row of `range`. Keys without
/// partitions are kept: their rows are filtered after reading.
pub fn may_overlap(key: &str, range: &TimeRange) -> bool {
    span_of(key).is_none_or(|(start, end)| range.overlaps(start, end))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::range::range_of as range;

    #[test]
    fn one_listing_per_day_of_the_range() {
        let r = range("2026-11-21T23:30:00Z", "2026-11-23T00:00:00Z");
        assert_eq!(
            prefixes("cuda", &r),
            ["cuda/dt=2026-11-21/", "cuda/dt=2026-11-22/"]
        );
        let long = range("2020-01-01T00:00:00Z", "2026-11-23T00:00:00Z");
        assert_eq!(prefixes("xid", &long), ["xid/"]);
    }

    #[test]
    fn hours_outside_the_range_are_pruned() {
        let r = range("2026-11-22T03:30:00Z", "2026-11-22T05:00:00Z");
        let key = |hour: &str| format!("cuda/dt=2026-11-22/hour={hour}/part-a.parquet");
        assert!(!may_overlap(&key("02"), &r));
        assert!(may_overlap(&key("03"), &r), "partly inside");
        assert!(may_overlap(&key("04"), &r));
        assert!(!may_overlap(&key("05"), &r), "the end is exclusive");
        assert!(!may_overlap("cuda/dt=2026-11-21/part-a.parquet", &r));
        assert!(may_overlap("cuda/loose.parquet", &r), "no partitions: kept");
        assert!(may_overlap("cuda/dt=garbage/part.parquet", &r));
    }
}
