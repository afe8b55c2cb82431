//! The time range a view covers, from `--since` and `--until`: a duration back from now
//! (`30m`, `6h`, `2d`, parsed by humantime) or an RFC 3339 timestamp (`2026-11-22T03:00:00Z`).

use std::fmt;

use chrono::{DateTime, Duration, SecondsFormat, Utc};

/// What is wrong with a `--since`/`--until` value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RangeError {
    /// Neither a duration nor an RFC 3339 timestamp.
    #[error(
        "{value:?} is neither a duration back from now (30s, 30m, 6h, 2d, 1w) nor an RFC 3339 \
         timestamp (2026-11-22T03:00:00Z)"
    )]
    Unrecognized {
        /// The value as given.
        value: String,
    },
    /// A duration too large to subtract from now.
    #[error("{value:?} reaches too far back")]
    TooFar {
        /// The value as given.
        value: String,
    },
    /// The range is empty.
    #[error("--since ({since}) must be before --until ({until})")]
    Empty {
        /// Start, RFC 3339.
        since: String,
        /// End, RFC 3339.
        until: String,
    },
}

/// A half-open interval of event time, `[since, until)`, in UTC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeRange {
    since: DateTime<Utc>,
    until: DateTime<Utc>,
}

impl TimeRange {
    /// The range from `since` to `until`; empty ranges are refused.
    pub fn new(since: DateTime<Utc>, until: DateTime<Utc>) -> Result<Self, RangeError> {
        if since >= until {
            return Err(RangeError::Empty {
                since: rfc3339(since),
                until: rfc3339(until),
            });
        }
        Ok(Self { since, until })
    }

    /// The range the command line asks for; `until` defaults to `now`.
    pub fn parse(since: &str, until: Option<&str>, now: DateTime<Utc>) -> Result<Self, RangeError> {
        let start = parse_instant(since, now)?;
        let end = match until {
            Some(text) => parse_instant(text, now)?,
            None => now,
        };
        Self::new(start, end)
    }

    /// Start (inclusive).
    pub fn since(&self) -> DateTime<Utc> {
        self.since
    }

    /// End (exclusive).
    pub fn until(&self) -> DateTime<Utc> {
        self.until
    }

    /// Start in microseconds since the epoch (the `time` column's unit).
    pub fn since_micros(&self) -> i64 {
        self.since.timestamp_micros()
    }

    /// End in microseconds since the epoch.
    pub fn until_micros(&self) -> i64 {
        self.until.timestamp_micros()
    }

    /// True when `micros` (since the epoch) falls inside.
    pub fn contains_micros(&self, micros: i64) -> bool {
        (self.since_micros()..self.until_micros()).contains(&micros)
    }

    /// True when `[start, end)` shares an instant with this range.
    pub fn overlaps(&self, start: DateTime<Utc>, end: DateTime<Utc>) -> bool {
        start < self.until && end > self.since
    }

    /// Length in seconds, with fractions.
    pub fn seconds(&self) -> f64 {
        (self.until - self.since)
            .num_microseconds()
            .unwrap_or(i64::MAX) as f64
            / 1e6
    }
}

impl fmt::Display for TimeRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} to {}", rfc3339(self.since), rfc3339(self.until))
    }
}

/// `2026-11-22T03:00:00Z`, with fractions only when there are any.
pub fn rfc3339(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::AutoSi, true)
}

/// One `--since`/`--until` value: a duration before `now`, or an RFC 3339 timestamp.
pub fn parse_instant(text: &str, now: DateTime<Utc>) -> Result<DateTime<Utc>, RangeError> {
    let text = text.trim();
    if let Some(back) = parse_duration(text) {
        return back
            .and_then(|d| now.checked_sub_signed(d))
            .ok_or_else(|| RangeError::TooFar {
                value: text.to_string(),
            });
    }
    DateTime::parse_from_rfc3339(text)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|_| RangeError::Unrecognized {
            value: text.to_string(),
        })
}

/// `Some(None)` for a duration too large to represent; `None` when `text` is not a duration.
/// The grammar is humantime's (`30s`, `30m`, `6h`, `2d`, `1w`, also `1h30m`, `90min`); a
/// value must start with a digit, so signs and words are refused before humantime sees them.
fn parse_duration(text: &str) -> Option<Option<Duration>> {
    if !text.starts_with(|c: char| c.is_ascii_digit()) {
        return None;
    }
    match humantime::parse_duration(text) {
        Ok(back) => Some(Duration::from_std(back).ok()),
        Err(humantime::DurationError::NumberOverflow) => Some(None),
        Err(_) => None,
    }
}

/// The range between two `--since`/`--until` texts, relative to now; for tests.
#[cfg(test)]
pub(crate) fn range_of(since: &str, until: &str) -> TimeRange {
    let now = Utc::now();
    TimeRange::new(
        parse_instant(since, now).expect("since"),
        parse_instant(until, now).expect("until"),
    )
    .expect("range")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-11-22T12:00:00Z")
            .unwrap()
            .with_timezone(&Utc)
    }

    #[test]
    fn durations_count_back_from_now() {
        for (text, expected) in [
            ("30m", "2026-11-22T11:30:00Z"),
            ("6h", "2026-11-22T06:00:00Z"),
            ("2d", "2026-11-20T12:00:00Z"),
            ("45s", "2026-11-22T11:59:15Z"),
            ("1w", "2026-11-15T12:00:00Z"),
        ] {
            assert_eq!(
                rfc3339(parse_instant(text, now()).unwrap()),
                expected,
                "{text}"
            );
        }
    }

    #[test]
    fn timestamps_are_rfc3339_in_any_offset() {
        let at = parse_instant("2026-11-22T05:30:00.25+02:00", now()).unwrap();
        assert_eq!(rfc3339(at), "2026-11-22T03:30:00.250Z");
    }

    #[test]
    fn bad_values_say_what_is_accepted() {
        for text in ["", "6", "h", "6x", "-6h", "yesterday", "2026-11-22"] {
            let err = parse_instant(text, now()).unwrap_err();
            assert!(
                matches!(err, RangeError::Unrecognized { .. }),
                "{text}: {err}"
            );
            assert!(err.to_string().contains("RFC 3339"));
        }
        assert!(matches!(
            parse_instant("99999999999999999999d", now()),
            Err(RangeError::TooFar { .. })
        ));
    }

    #[test]
    fn until_defaults_to_now_and_the_range_is_half_open() {
        let range = TimeRange::parse("1h", None, now()).unwrap();
        assert_eq!(
            range.to_string(),
            "2026-11-22T11:00:00Z to 2026-11-22T12:00:00Z"
        );
        assert_eq!(range.seconds(), 3600.0);
        assert!(range.contains_micros(range.since_micros()));
        assert!(!range.contains_micros(range.until_micros()));
        let err = TimeRange::parse("1h", Some("2h"), now()).unwrap_err();
        assert!(err.to_string().contains("must be before"), "{err}");
    }
}
