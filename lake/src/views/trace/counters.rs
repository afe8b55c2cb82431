//! `cuda_stats` rows as counter tracks of the trace: single calls of stats mode are not known,
//! only how many there were per interval and how long they took, so each (process, function)
//! gets counters instead of slices:
//!
//! - `<function> calls` (`per s`): calls per second over the interval, every result together
//!   (the failed ones are slices as well, from their `cuda` rows);
//! - `<function> mean latency` and `<function> p99 latency` (`ns`), for timed functions: the
//!   mean from the rows' duration sums, the p99 from their merged histograms ([`Durations`]).
//!
//! Rows of one process, function and interval (one per result) make one sample, set at the
//! interval's start (`time_ns - interval_ns`: `time` is its end). A track drops to zero at the
//! end of an interval unless the next one of the track starts within half an interval of it
//! (the agent's intervals follow one another). A row without an interval has no rate and is
//! not drawn; an interval longer than [`MAX_DRAWN_INTERVAL_NS`] is drawn over that much (the
//! agent's longest is an hour), so a hostile row cannot push the trace's origin out of range.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::views::cuda_stats::CudaStats;
use crate::views::histogram::Durations;

/// The longest stretch one row is drawn over.
pub const MAX_DRAWN_INTERVAL_NS: u64 = 86_400_000_000_000;

/// One point of a (process, function) track.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample<'a> {
    /// When the values start, nanoseconds since the epoch.
    pub at_ns: i64,
    pub pid: i32,
    pub function: &'a str,
    /// Calls per second.
    pub per_second: f64,
    /// Mean and p99 duration, for timed functions.
    pub latency: Option<(u64, u64)>,
}

/// What the rows make: samples in time order per track, how many rows were drawn, and a
/// process name (the row's `comm`) per pid.
#[derive(Debug, Default)]
pub struct Counters<'a> {
    pub samples: Vec<Sample<'a>>,
    pub rows: usize,
    pub comms: BTreeMap<i32, &'a str>,
}

/// Rows of one process, function and interval.
#[derive(Default)]
struct Interval {
    calls: u128,
    interval_ns: u64,
    timed: bool,
    durations: Durations,
}

/// The intervals of one (pid, function) track by (start, end).
type Track = BTreeMap<(i64, i64), Interval>;

/// The counter samples of `stats`.
pub fn counters(stats: &[CudaStats]) -> Counters<'_> {
    let mut out = Counters::default();
    let mut tracks: BTreeMap<(i32, &str), Track> = BTreeMap::new();
    for row in stats.iter().filter(|r| r.interval_ns > 0) {
        let drawn = row.interval_ns.min(MAX_DRAWN_INTERVAL_NS) as i64;
        let start = row.time_ns.saturating_sub(drawn);
        let interval = tracks
            .entry((row.pid, row.function.as_str()))
            .or_default()
            .entry((start, row.time_ns))
            .or_default();
        interval.calls += u128::from(row.calls);
        interval.interval_ns = row.interval_ns;
        if !row.entry_only() {
            interval.timed = true;
            row.add_durations_to(&mut interval.durations);
        }
        out.rows += 1;
        out.comms.entry(row.pid).or_insert(row.comm.as_str());
    }
    for ((pid, function), intervals) in &tracks {
        let mut intervals = intervals.iter().peekable();
        while let Some((&(start, end), interval)) = intervals.next() {
            let latency = interval.timed.then(|| {
                let (mean, p99) = (interval.durations.mean(), interval.durations.quantile(0.99));
                (mean.unwrap_or(0), p99.unwrap_or(0))
            });
            let sample = |at_ns, per_second, latency| Sample {
                at_ns,
                pid: *pid,
                function,
                per_second,
                latency,
            };
            out.samples.push(sample(
                start,
                interval.calls as f64 * 1e9 / interval.interval_ns as f64,
                latency,
            ));
            let slack = (end.saturating_sub(start)) / 2;
            let continued = intervals
                .peek()
                .is_some_and(|(&(next, _), _)| next <= end.saturating_add(slack));
            if !continued {
                out.samples.push(sample(end, 0.0, latency.map(|_| (0, 0))));
            }
        }
    }
    out
}

/// The trace events of `sample`, `at_ns` after the trace's origin.
pub fn events(sample: &Sample<'_>, at_ns: i64) -> Vec<Value> {
    let ts = at_ns as f64 / 1_000.0;
    let counter = |name: String, args: Value| {
        json!({
            "name": name, "cat": "cuda_stats", "ph": "C", "ts": ts,
            "pid": sample.pid, "tid": sample.pid, "args": args,
        })
    };
    let mut events = vec![counter(
        format!("{} calls", sample.function),
        json!({"per s": sample.per_second}),
    )];
    if let Some((mean, p99)) = sample.latency {
        events.push(counter(
            format!("{} mean latency", sample.function),
            json!({"ns": mean}),
        ));
        events.push(counter(
            format!("{} p99 latency", sample.function),
            json!({"ns": p99}),
        ));
    }
    events
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::views::cuda_stats::cuda_stats;
    use crate::views::fixtures::{stats_batch, stats_row};

    const S: i64 = 1_000_000_000;

    #[test]
    fn intervals_become_samples_that_drop_to_zero_after_a_gap() {
        let mut failed = stats_row(20 * S, "cuLaunchKernel", 2, &[(1_024, 1_280, 2)]);
        failed.result = 700;
        let stats = cuda_stats(&[stats_batch(&[
            // 10..20 s and 20..30 s follow each other; 50..60 s after a gap.
            stats_row(20 * S, "cuLaunchKernel", 8, &[(896, 1_024, 8)]),
            failed,
            stats_row(30 * S, "cuLaunchKernel", 5, &[(1_024, 1_280, 5)]),
            stats_row(60 * S, "cuLaunchKernel", 1, &[(64, 80, 1)]),
        ])]);
        let counters = counters(&stats);
        assert_eq!(counters.rows, 4);
        assert_eq!(counters.comms.get(&100), Some(&"train"));
        type Point = (i64, f64, Option<(u64, u64)>);
        let points: Vec<Point> = counters
            .samples
            .iter()
            .map(|s| (s.at_ns, s.per_second, s.latency))
            .collect();
        // 10..20 s: 10 calls (8 + the 2 failed); mean (8*896 + 2*1024) / 10 = 921; rank 9.9
        // is the 1.9th of the 2 in [1024, 1280): 1024 + 0.95 * 256. 20..30 s: rank 4.95 of 5
        // in [1024, 1280): 1024 + 0.99 * 256. 50..60 s: one call in [64, 80), kept within
        // its maximum, 79.
        assert_eq!(
            points,
            [
                (10 * S, 1.0, Some((921, 1_267))),
                (20 * S, 0.5, Some((1_024, 1_277))),
                (30 * S, 0.0, Some((0, 0))),
                (50 * S, 0.1, Some((64, 79))),
                (60 * S, 0.0, Some((0, 0))),
            ]
        );
    }

    #[test]
    fn entry_only_rates_have_no_latency_and_odd_intervals_stay_drawable() {
        let mut entry_only = stats_row(20 * S, "cuLaunchKernelEx", 30, &[]);
        entry_only.result_name = "NOT_CAPTURED".into();
        let mut endless = stats_row(20 * S, "cuMemcpyAsync", u64::MAX, &[(64, 80, 1)]);
        endless.interval_ns = u64::MAX;
        let mut instant = stats_row(20 * S, "cuGraphLaunch", 1, &[(64, 80, 1)]);
        instant.interval_ns = 0;
        let stats = cuda_stats(&[stats_batch(&[entry_only, endless, instant])]);
        let counters = counters(&stats);
        assert_eq!(counters.rows, 2, "no interval: not drawn");
        let ex = &counters.samples[0];
        assert_eq!(
            (ex.function, ex.at_ns, ex.per_second, ex.latency),
            ("cuLaunchKernelEx", 10 * S, 3.0, None)
        );
        let copy = &counters.samples[2];
        assert_eq!(copy.at_ns, 20 * S - MAX_DRAWN_INTERVAL_NS as i64);
        assert_eq!(copy.per_second, u64::MAX as f64 * 1e9 / u64::MAX as f64);
        let events = events(copy, 0);
        assert_eq!(events.len(), 3);
        assert_eq!(events[0]["name"], "cuMemcpyAsync calls");
        assert_eq!(events[0]["ph"], "C");
        assert_eq!(events[1]["name"], "cuMemcpyAsync mean latency");
        assert_eq!(events[2]["args"]["ns"], 79);
    }
}
