//! Per-process call counts: [`ProcessTally`] counts on the consumer's hot path without a hash
//! lookup per call, [`ProcessTable`] holds the bounded, shared totals the live view serves.

use std::collections::HashMap;

use crate::decode::c_chars;

/// Length of a kernel task name (`TASK_COMM_LEN`).
const COMM_LEN: usize = 16;

/// Consecutive calls of one process: records arrive in runs (a ring drain holds many calls of
/// the same process), so a call costs one comparison and two additions; the hash map is
/// touched once per run.
#[derive(Debug, Default, Clone, Copy)]
struct Run {
    pid: i32,
    comm: [i8; COMM_LEN],
    calls: u64,
    errors: u64,
}

/// Calls and failed calls of one process since the last [`ProcessTally::drain`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessDelta {
    /// The task name of the process's latest run of calls (NUL-padded).
    pub comm: [i8; COMM_LEN],
    /// Calls.
    pub calls: u64,
    /// Calls that failed.
    pub errors: u64,
}

/// The consumer thread's per-process counts since the last publication.
#[derive(Debug, Default)]
pub struct ProcessTally {
    run: Run,
    pending: HashMap<i32, ProcessDelta>,
}

impl ProcessTally {
    /// Counts one call of process `pid` (task name `comm`).
    #[inline]
    pub fn record(&mut self, pid: i32, comm: &[i8], failed: bool) {
        if pid != self.run.pid || self.run.calls == 0 {
            self.start_run(pid, comm);
        }
        self.run.calls += 1;
        self.run.errors += u64::from(failed);
    }

    /// Counts `calls` successful calls of process `pid` at once (statistics from the kernel).
    pub fn record_many(&mut self, pid: i32, comm: &[i8], calls: u64) {
        if calls == 0 {
            return;
        }
        if pid != self.run.pid || self.run.calls == 0 {
            self.start_run(pid, comm);
        }
        self.run.calls = self.run.calls.saturating_add(calls);
    }

    fn start_run(&mut self, pid: i32, comm: &[i8]) {
        self.end_run();
        self.run.pid = pid;
        let len = comm.len().min(COMM_LEN);
        self.run.comm = [0; COMM_LEN];
        self.run.comm[..len].copy_from_slice(&comm[..len]);
    }

    fn end_run(&mut self) {
        let run = &mut self.run;
        if run.calls == 0 {
            return;
        }
        let delta = self.pending.entry(run.pid).or_insert(ProcessDelta {
            comm: run.comm,
            calls: 0,
            errors: 0,
        });
        delta.comm = run.comm;
        delta.calls += run.calls;
        delta.errors += run.errors;
        run.calls = 0;
        run.errors = 0;
    }

    /// Takes everything counted since the last drain.
    pub fn drain(&mut self) -> impl Iterator<Item = (i32, ProcessDelta)> + '_ {
        self.end_run();
        self.pending.drain()
    }
}

#[derive(Debug, Clone)]
struct Entry {
    comm: String,
    calls: u64,
    errors: u64,
    last_seen: u64,
}

/// Totals per process since the agent started, for at most `capacity` processes: when a new
/// process would exceed it, the least recently seen ones are forgotten (and counted).
#[derive(Debug)]
pub struct ProcessTable {
    entries: HashMap<i32, Entry>,
    capacity: usize,
    /// Advances once per publication; an entry's `last_seen` is the publication that last
    /// brought it calls.
    clock: u64,
    evicted: u64,
}

/// One process's totals, as served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessTotals {
    /// Process id (thread group id).
    pub pid: i32,
    /// Latest task name seen making calls.
    pub comm: String,
    /// Calls.
    pub calls: u64,
    /// Failed calls.
    pub errors: u64,
}

impl ProcessTable {
    /// An empty table holding at most `capacity` processes.
    pub fn new(capacity: usize) -> Self {
        Self {
            entries: HashMap::new(),
            capacity: capacity.max(1),
            clock: 0,
            evicted: 0,
        }
    }

    /// Adds one publication's deltas, then forgets the least recently seen processes beyond
    /// the capacity.
    pub fn add(&mut self, deltas: impl Iterator<Item = (i32, ProcessDelta)>) {
        self.clock += 1;
        for (pid, delta) in deltas {
            let comm = c_chars(&delta.comm);
            let entry = self.entries.entry(pid).or_insert_with(|| Entry {
                comm: String::new(),
                calls: 0,
                errors: 0,
                last_seen: 0,
            });
            if entry.comm != comm {
                entry.comm = comm.into_owned();
            }
            entry.calls += delta.calls;
            entry.errors += delta.errors;
            entry.last_seen = self.clock;
        }
        let excess = self.entries.len().saturating_sub(self.capacity);
        if excess > 0 {
            let mut by_age: Vec<(u64, i32)> = self
                .entries
                .iter()
                .map(|(pid, e)| (e.last_seen, *pid))
                .collect();
            by_age.select_nth_unstable(excess - 1);
            for (_, pid) in &by_age[..excess] {
                self.entries.remove(pid);
            }
            self.evicted += excess as u64;
        }
    }

    /// Processes forgotten to keep the table within its capacity.
    pub fn evicted(&self) -> u64 {
        self.evicted
    }

    /// Every process held, most calls first.
    pub fn totals(&self) -> Vec<ProcessTotals> {
        let mut all: Vec<ProcessTotals> = self
            .entries
            .iter()
            .map(|(pid, e)| ProcessTotals {
                pid: *pid,
                comm: e.comm.clone(),
                calls: e.calls,
                errors: e.errors,
            })
            .collect();
        all.sort_by(|a, b| b.calls.cmp(&a.calls).then(a.pid.cmp(&b.pid)));
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn comm(name: &str) -> Vec<i8> {
        name.bytes().map(|b| b as i8).collect()
    }

    #[test]
    fn runs_of_calls_become_per_process_deltas() {
        let mut tally = ProcessTally::default();
        for _ in 0..3 {
            tally.record(10, &comm("trainer"), false);
        }
        tally.record(20, &comm("python3"), true);
        tally.record(10, &comm("pt_main_thread"), true);
        let mut deltas: Vec<_> = tally.drain().collect();
        deltas.sort_by_key(|(pid, _)| *pid);
        assert_eq!(deltas.len(), 2);
        assert_eq!((deltas[0].1.calls, deltas[0].1.errors), (4, 1));
        assert_eq!(c_chars(&deltas[0].1.comm), "pt_main_thread");
        assert_eq!((deltas[1].1.calls, deltas[1].1.errors), (1, 1));
        assert_eq!(tally.drain().count(), 0, "a drain empties the tally");
        // A run continuing across a drain is counted once.
        tally.record(10, &comm("trainer"), false);
        let deltas: Vec<_> = tally.drain().collect();
        assert_eq!(deltas[0].1.calls, 1);
    }

    #[test]
    fn the_table_keeps_totals_and_forgets_the_least_recently_seen() {
        let mut table = ProcessTable::new(2);
        let mut tally = ProcessTally::default();
        tally.record(1, &comm("a"), false);
        tally.record(2, &comm("b"), false);
        table.add(tally.drain());
        tally.record(1, &comm("a"), true);
        table.add(tally.drain());
        tally.record(3, &comm("c"), false);
        table.add(tally.drain());
        let totals = table.totals();
        assert_eq!(
            totals,
            vec![
                ProcessTotals {
                    pid: 1,
                    comm: "a".into(),
                    calls: 2,
                    errors: 1
                },
                ProcessTotals {
                    pid: 3,
                    comm: "c".into(),
                    calls: 1,
                    errors: 0
                },
            ]
        );
        assert_eq!(table.evicted(), 1);
    }
}
