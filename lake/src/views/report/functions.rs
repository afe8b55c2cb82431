//! CUDA call statistics per function for the report, from both places calls are kept: `cuda`
//! rows (one per call) and `cuda_stats` rows (stats mode: calls added up per process, function
//! and result per interval). Every call counts once:
//!
//! - For a (host, pid, function) with `cuda_stats` rows, its **successful** calls, their
//!   durations and its entry-only calls come from the aggregates only, and its **failed** calls
//!   from its `cuda` rows only. In stats mode the kernel adds every call to the aggregate and
//!   also sends the failed and the slow ones as rows: a slow successful call is in both, and is
//!   counted from the aggregate; a failed one is in both, and is counted from its row (which
//!   has its arguments and incident), as the agent's run summary counts them.
//! - Every other (host, pid, function) counts its `cuda` rows, as before stats mode.
//!
//! Durations: mean over the calls with a duration; p50/p99 nearest rank over single calls,
//! interpolated within the aggregates' histogram buckets for aggregated calls
//! ([`Durations`]). Entry-only calls have no duration and are left out of them.
//!
//! Rows of the flight recorder (`flight_recorder = true`) count nowhere here: they are copies,
//! written when an incident started, of calls already counted (in the aggregates, or as rows).
//! The incident views show them.
//!
//! Every `cuda_stats` row must be added before the first `cuda` row: the rows decide which
//! `cuda` rows the aggregates already count.

use std::collections::BTreeSet;

use super::format;
use crate::views::cuda_stats::{CudaStats, StatsRow};
use crate::views::histogram::Durations;
use crate::views::rows::CudaCall;

/// Call statistics of one CUDA function.
#[derive(Debug, Clone, PartialEq)]
pub struct FunctionStats {
    /// Exported symbol.
    pub function: String,
    /// Calls in the range.
    pub calls: u64,
    /// Calls per second over the whole range.
    pub per_second: f64,
    /// Calls that returned an error.
    pub errors: u64,
    /// Mean duration (calls with a duration only).
    pub mean_ns: Option<u64>,
    /// Median duration.
    pub p50_ns: Option<u64>,
    /// 99th percentile duration.
    pub p99_ns: Option<u64>,
    /// Calls recorded at entry only (no duration).
    pub entry_only: u64,
    /// Calls counted from `cuda_stats` aggregates (0: every call is a `cuda` row).
    pub aggregated: u64,
}

/// One function's counts so far.
#[derive(Debug, Clone, Default)]
struct Counts {
    calls: u64,
    errors: u64,
    entry_only: u64,
    aggregated: u64,
    durations: Durations,
    /// Single calls per label ([`format::label_index`]), added to `durations` at the end: a
    /// fleet's day has a hundred million calls, and an array slot is cheaper than a map entry.
    /// Empty until the first call; calls of a duration past the table go to `durations`.
    labels: Vec<u64>,
}

impl Counts {
    /// One call of `duration_ns` in its label's bucket.
    fn add_duration(&mut self, duration_ns: u64) {
        let Some(index) = format::label_index(duration_ns) else {
            let bucket = format::duration_bucket(duration_ns);
            self.durations.add_call(bucket, duration_ns);
            return;
        };
        if self.labels.is_empty() {
            self.labels = vec![0; format::tabled_labels()];
        }
        self.labels[index] += 1;
        self.durations.add_exact(duration_ns);
    }

    /// The durations with the calls counted per label added.
    fn durations(mut self) -> Durations {
        for (index, &calls) in self.labels.iter().enumerate() {
            self.durations
                .add_points(format::label_start(index), u128::from(calls));
        }
        self.durations
    }
}

/// How the successful calls of one (host, pid, function) count, and where its function's
/// counts are once it has some.
#[derive(Debug, Clone, Copy)]
pub struct CallKey {
    aggregated: bool,
    slot: Option<usize>,
}

/// Per-function counts of `cuda_stats` and `cuda` rows, each call once (module doc).
#[derive(Debug, Clone, Default)]
pub struct Tally {
    /// function -> its place in `counts`.
    slots: foldhash::HashMap<String, usize>,
    /// Per function, in the order first seen.
    counts: Vec<(String, Counts)>,
    /// function -> host -> pids with `cuda_stats` rows: their successful `cuda` rows are
    /// already counted by the aggregates.
    aggregated: foldhash::HashMap<String, foldhash::HashMap<String, foldhash::HashSet<i32>>>,
    /// Hosts that wrote a counted row.
    pub hosts: BTreeSet<String>,
    /// Flight-recorder rows seen (and not counted as calls).
    pub flight_recorded: u64,
}

/// `map`'s entry for `key`, inserted with its default when missing: looked up by reference
/// first, so a name is copied once per key, not once per row (a fleet's day has hundreds of
/// millions of rows).
fn entry<'m, V: Default>(map: &'m mut foldhash::HashMap<String, V>, key: &str) -> &'m mut V {
    if !map.contains_key(key) {
        map.insert(key.to_string(), V::default());
    }
    map.get_mut(key).expect("inserted just above")
}

impl Tally {
    /// Functions counted so far.
    pub fn functions_seen(&self) -> usize {
        self.counts.len()
    }

    fn slot(&mut self, function: &str) -> usize {
        if let Some(&slot) = self.slots.get(function) {
            return slot;
        }
        self.counts.push((function.to_string(), Counts::default()));
        self.slots
            .insert(function.to_string(), self.counts.len() - 1);
        self.counts.len() - 1
    }

    fn counts(&mut self, function: &str) -> &mut Counts {
        let slot = self.slot(function);
        &mut self.counts[slot].1
    }

    /// How the calls of `pid` on `host` to `function` count ([`Tally::add_call_as`]): looked up
    /// once per process and function of a batch instead of once per row.
    pub fn call_key(&self, host: &str, pid: i32, function: &str) -> CallKey {
        CallKey {
            aggregated: !self.aggregated.is_empty() && self.is_aggregated(host, pid, function),
            slot: self.slots.get(function).copied(),
        }
    }

    /// Adds one `cuda_stats` row. Failed aggregates count nothing: each failed call is a
    /// `cuda` row, counted there.
    pub fn add_stats(&mut self, row: &StatsRow<'_>) {
        entry(entry(&mut self.aggregated, row.function), row.host).insert(row.pid);
        if !row.host.is_empty() && !self.hosts.contains(row.host) {
            self.hosts.insert(row.host.to_string());
        }
        if row.failed() {
            return;
        }
        let counts = self.counts(row.function);
        counts.calls = counts.calls.saturating_add(row.calls);
        counts.aggregated = counts.aggregated.saturating_add(row.calls);
        if row.entry_only() {
            counts.entry_only = counts.entry_only.saturating_add(row.calls);
        } else {
            row.add_durations_to(&mut counts.durations);
        }
    }

    /// Whether the aggregates count the successful calls of `pid` on `host` to `function`.
    fn is_aggregated(&self, host: &str, pid: i32, function: &str) -> bool {
        self.aggregated
            .get(function)
            .and_then(|hosts| hosts.get(host))
            .is_some_and(|pids| pids.contains(&pid))
    }

    /// Adds one `cuda` row: a call of `function` by `pid` on `host` (the host is added to
    /// [`Tally::hosts`] by the caller) that returned `result` after `duration_ns`, or was
    /// recorded at entry only.
    pub fn add_call(
        &mut self,
        (host, pid): (&str, i32),
        function: &str,
        duration_ns: u64,
        result: u32,
        entry_only: bool,
    ) {
        let mut key = self.call_key(host, pid, function);
        self.add_call_as(&mut key, function, duration_ns, result, entry_only);
    }

    /// [`Tally::add_call`] with the call's [`CallKey`] (from [`Tally::call_key`] for the same
    /// host, pid and function), which learns the function's place when it first counts.
    pub fn add_call_as(
        &mut self,
        key: &mut CallKey,
        function: &str,
        duration_ns: u64,
        result: u32,
        entry_only: bool,
    ) {
        let failed = result != 0 && !entry_only;
        if !failed && key.aggregated {
            return;
        }
        let slot = *key.slot.get_or_insert_with(|| self.slot(function));
        let counts = &mut self.counts[slot].1;
        counts.calls = counts.calls.saturating_add(1);
        if entry_only {
            counts.entry_only += 1;
            return;
        }
        if failed {
            counts.errors += 1;
        }
        counts.add_duration(duration_ns);
    }

    /// The statistics per function over a range of `seconds`, most called first.
    pub fn finish(self, seconds: f64) -> Vec<FunctionStats> {
        let mut stats: Vec<FunctionStats> = self
            .counts
            .into_iter()
            .map(|(function, counts)| {
                let (calls, errors) = (counts.calls, counts.errors);
                let (entry_only, aggregated) = (counts.entry_only, counts.aggregated);
                let durations = counts.durations();
                FunctionStats {
                    calls,
                    per_second: if seconds > 0.0 {
                        calls as f64 / seconds
                    } else {
                        0.0
                    },
                    errors,
                    mean_ns: durations.mean(),
                    p50_ns: durations.quantile(0.50),
                    p99_ns: durations.quantile(0.99),
                    entry_only,
                    aggregated,
                    function,
                }
            })
            .collect();
        stats.sort_by(|a, b| b.calls.cmp(&a.calls).then(a.function.cmp(&b.function)));
        stats
    }
}

/// Statistics per function of `stats` and `calls`, over a range of `seconds`; most called
/// first.
pub fn per_function(calls: &[CudaCall], stats: &[CudaStats], seconds: f64) -> Vec<FunctionStats> {
    let mut tally = Tally::default();
    for row in stats {
        tally.add_stats(&row.as_row());
    }
    for call in calls {
        if call.flight_recorder {
            tally.flight_recorded = tally.flight_recorded.saturating_add(1);
            continue;
        }
        tally.add_call(
            (&call.host, call.pid),
            &call.function,
            call.duration_ns,
            call.result,
            call.entry_only(),
        );
    }
    tally.finish(seconds)
}

#[cfg(test)]
mod tests;
