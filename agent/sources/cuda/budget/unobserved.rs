//! When each process's hot functions were left unprobed by the overhead budget, for what an
//! incident reports: an XID's suspects (and the flight recorder's calls of its incident) drawn
//! from a window in which the process was sampled may miss the launch that faulted, so the XID
//! row says so (`suspects_sampled`). The budget records each tick's span without probes; the
//! XID stage asks through the launch history.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

/// How long unprobed spans are kept: longer than any incident window asks about.
pub const KEPT_NS: i64 = 120_000_000_000;

/// Per process, its recent spans (Unix ns, inclusive) without hot probes, oldest first.
#[derive(Debug, Default)]
pub struct Unobserved {
    spans: Mutex<HashMap<u32, VecDeque<(i64, i64)>>>,
}

impl Unobserved {
    /// `pids` had no hot probes from `from_ns` to `until_ns` (one tick of the budget).
    pub fn record(&self, pids: impl IntoIterator<Item = u32>, from_ns: i64, until_ns: i64) {
        let mut spans = self.spans.lock().unwrap_or_else(|e| e.into_inner());
        for pid in pids {
            let list = spans.entry(pid).or_default();
            match list.back_mut() {
                // The tick after an unprobed one: the same span goes on.
                Some(last) if from_ns <= last.1 => last.1 = last.1.max(until_ns),
                _ => list.push_back((from_ns, until_ns)),
            }
        }
        // Processes that exited (or are probed in full) go once their spans are old.
        let oldest = until_ns.saturating_sub(KEPT_NS);
        spans.retain(|_, list| {
            while list.front().is_some_and(|span| span.1 < oldest) {
                list.pop_front();
            }
            !list.is_empty()
        });
    }

    /// Whether `pid`'s hot functions went unprobed at some time in `from_ns..=until_ns`.
    pub fn between(&self, pid: i32, from_ns: i64, until_ns: i64) -> bool {
        let Ok(pid) = u32::try_from(pid) else {
            return false;
        };
        let spans = self.spans.lock().unwrap_or_else(|e| e.into_inner());
        spans.get(&pid).is_some_and(|list| {
            list.iter()
                .any(|(start, end)| *start <= until_ns && *end >= from_ns)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i64 = 1_000_000_000;

    #[test]
    fn a_window_before_an_incident_is_sampled_when_a_span_without_probes_meets_it() {
        let unobserved = Unobserved::default();
        // Unprobed from 10 s to 19 s in ticks, then probed (a window, or full after a boost).
        for tick in 10..19 {
            unobserved.record([7], tick * S, (tick + 1) * S);
        }
        assert_eq!(
            unobserved.spans.lock().unwrap()[&7],
            VecDeque::from([(10 * S, 19 * S)])
        );
        assert!(unobserved.between(7, 15 * S, 25 * S));
        assert!(unobserved.between(7, 19 * S, 29 * S));
        assert!(!unobserved.between(7, 19 * S + 1, 29 * S));
        assert!(!unobserved.between(7, 0, 10 * S - 1));
        // Another process, a negative pid, the limits of the type.
        assert!(!unobserved.between(8, i64::MIN, i64::MAX));
        assert!(!unobserved.between(-7, i64::MIN, i64::MAX));
        assert!(unobserved.between(7, i64::MIN, i64::MAX));
    }

    #[test]
    fn spans_older_than_two_minutes_are_dropped_and_gaps_make_new_spans() {
        let unobserved = Unobserved::default();
        unobserved.record([7], 0, S);
        unobserved.record([7], 2 * S, 3 * S);
        unobserved.record([7], 200 * S, 201 * S);
        assert_eq!(
            unobserved.spans.lock().unwrap()[&7],
            VecDeque::from([(200 * S, 201 * S)])
        );
        // Another process's tick two minutes on: the first one's spans are gone.
        unobserved.record([8], 400 * S, 401 * S);
        assert!(!unobserved.spans.lock().unwrap().contains_key(&7));
        unobserved.record([8], i64::MAX - 1, i64::MAX);
        assert_eq!(unobserved.spans.lock().unwrap()[&8].len(), 1);
    }
}
