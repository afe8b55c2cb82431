//! Each sink's counters by name, across configuration reloads.
//!
//! A reload that changes a sink replaces its running instance: the old one drains, then a new
//! one with fresh [`SinkStats`] takes over its name (and its spool and XID journal). A name's
//! counters are what its earlier instances counted (frozen when each retired) plus what the
//! running one counts, so `/metrics` stays monotonic and the per-sink identity
//! `received = delivered + dropped + failed + spooled_pending + in_flight` holds over the
//! name's whole life. Events an instance left in its spool or journal are counted again as
//! received by the next instance that opens them, so they are taken out of the retired
//! counts when that happens. A sink a reload removes keeps its final counters.

use std::collections::BTreeMap;
use std::sync::{Arc, PoisonError, RwLock};

use gpuship_sinks::{DropReason, EnumMap, EventKind, SinkStats};

use super::{SinkHealth, SinkSnapshot};

/// Every sink name the agent has run, with its counters.
#[derive(Debug, Default)]
pub(super) struct SinkTable(RwLock<Vec<SinkRow>>);

#[derive(Debug)]
struct SinkRow {
    name: String,
    /// The running instance; `None` once a reload removed the sink.
    current: Option<Arc<SinkStats>>,
    /// What the retired instances counted.
    retired: EnumMap<EventKind, Counts>,
    /// The retired instances' failed attempts by error label.
    retired_errors: BTreeMap<String, u64>,
    /// The retired instances' damaged spool or journal segments.
    retired_corrupt_segments: u64,
}

/// One kind's counters, as numbers.
#[derive(Debug, Default, Clone, Copy)]
struct Counts {
    received: u64,
    delivered: u64,
    dropped: EnumMap<DropReason, u64>,
    spooled: u64,
    replayed: u64,
    spool_pending: u64,
    filtered: u64,
    failed: u64,
}

impl Counts {
    fn read(stats: &SinkStats, kind: EventKind) -> Self {
        Self {
            received: stats.received.get(kind),
            delivered: stats.delivered.get(kind),
            dropped: EnumMap::from_fn(|reason| stats.dropped(reason, kind)),
            spooled: stats.spooled.get(kind),
            replayed: stats.replayed.get(kind),
            spool_pending: stats.spool_pending(kind),
            filtered: stats.filtered.get(kind),
            failed: stats.failed.get(kind),
        }
    }

    fn add(&mut self, other: &Counts) {
        self.received += other.received;
        self.delivered += other.delivered;
        for (reason, n) in &other.dropped {
            self.dropped[reason] += n;
        }
        self.spooled += other.spooled;
        self.replayed += other.replayed;
        self.spool_pending += other.spool_pending;
        self.filtered += other.filtered;
        self.failed += other.failed;
    }

    fn settled(&self) -> u64 {
        self.delivered + self.dropped.values().sum::<u64>() + self.failed
    }
}

impl SinkTable {
    fn rows(&self) -> std::sync::RwLockReadGuard<'_, Vec<SinkRow>> {
        self.0.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn rows_mut(&self) -> std::sync::RwLockWriteGuard<'_, Vec<SinkRow>> {
        self.0.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// Makes `stats` the running instance of `name`. When an earlier instance of the name left
    /// events in the spool or journal that this one opened (`opens_spool`), they are counted
    /// by this one from now on.
    pub fn add(&self, name: &str, stats: Arc<SinkStats>, opens_spool: bool) {
        let mut rows = self.rows_mut();
        let Some(row) = rows.iter_mut().find(|row| row.name == name) else {
            rows.push(SinkRow {
                name: name.to_string(),
                current: Some(stats),
                retired: EnumMap::default(),
                retired_errors: BTreeMap::new(),
                retired_corrupt_segments: 0,
            });
            return;
        };
        if let Some(running) = row.current.take() {
            retire_into(row, &running);
        }
        if opens_spool {
            for counts in row.retired.values_mut() {
                // Whatever the retired instances had not settled is on disk, now the new
                // instance's: it counted it as received (and the spool's part as spooled).
                counts.received = counts.settled();
                counts.spooled -= counts.spooled.min(counts.spool_pending);
                counts.spool_pending = 0;
            }
        }
        row.current = Some(stats);
    }

    /// Freezes the counters of `name`'s running instance, which has finished.
    pub fn retire(&self, name: &str) {
        let mut rows = self.rows_mut();
        if let Some(row) = rows.iter_mut().find(|row| row.name == name) {
            if let Some(running) = row.current.take() {
                retire_into(row, &running);
            }
        }
    }

    /// The running instances.
    pub fn running(&self) -> Vec<(String, Arc<SinkStats>)> {
        self.rows()
            .iter()
            .filter_map(|row| Some((row.name.clone(), row.current.clone()?)))
            .collect()
    }

    /// Every name's counters for every kind, and the running sinks' health.
    pub fn snapshot(&self) -> (Vec<SinkSnapshot>, Vec<SinkHealth>) {
        let rows = self.rows();
        let mut sinks = Vec::new();
        let mut health = Vec::new();
        for row in rows.iter() {
            for kind in EventKind::all() {
                let mut counts = row.retired[kind];
                let mut queued_events = 0;
                if let Some(stats) = &row.current {
                    counts.add(&Counts::read(stats, kind));
                    queued_events = stats.queued_events_of(kind);
                }
                sinks.push(sink_snapshot(&row.name, kind, &counts, queued_events));
            }
            if let Some(stats) = &row.current {
                let mut errors = row.retired_errors.clone();
                for (error, n) in stats.errors() {
                    *errors.entry(error).or_default() += n;
                }
                health.push(SinkHealth {
                    sink: row.name.clone(),
                    healthy: stats.healthy(),
                    errors,
                    corrupt_segments: row.retired_corrupt_segments + stats.corrupt_segments(),
                });
            }
        }
        (sinks, health)
    }
}

fn retire_into(row: &mut SinkRow, stats: &SinkStats) {
    for (kind, counts) in row.retired.iter_mut() {
        counts.add(&Counts::read(stats, kind));
    }
    for (error, n) in stats.errors() {
        *row.retired_errors.entry(error).or_default() += n;
    }
    row.retired_corrupt_segments += stats.corrupt_segments();
}

fn sink_snapshot(name: &str, kind: EventKind, c: &Counts, queued_events: u64) -> SinkSnapshot {
    SinkSnapshot {
        sink: name.to_string(),
        kind,
        received: c.received,
        delivered: c.delivered,
        dropped: c.dropped.values().sum(),
        filtered: c.filtered,
        dropped_by_reason: DropReason::ALL
            .iter()
            .map(|&r| (r.as_str(), c.dropped[r]))
            .collect(),
        spooled: c.spooled,
        replayed: c.replayed,
        spooled_pending: c.spool_pending,
        failed: c.failed,
        in_flight: c.received.saturating_sub(c.settled() + c.spool_pending),
        queued_events,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(received: u64, delivered: u64) -> Arc<SinkStats> {
        let stats = Arc::new(SinkStats::default());
        stats.received.add(EventKind::Cuda, received);
        stats.delivered.add(EventKind::Cuda, delivered);
        stats
    }

    fn cuda(table: &SinkTable, name: &str) -> SinkSnapshot {
        let (sinks, _) = table.snapshot();
        sinks
            .into_iter()
            .find(|s| s.sink == name && s.kind == EventKind::Cuda)
            .expect("row")
    }

    #[test]
    fn a_replaced_sink_keeps_counting_under_its_name() {
        let table = SinkTable::default();
        table.add("lake", stats(10, 10), true);
        table.add("lake", stats(5, 3), true);
        let lake = cuda(&table, "lake");
        assert_eq!((lake.received, lake.delivered, lake.in_flight), (15, 13, 2));
        assert_eq!(table.running().len(), 1);
        assert_eq!(table.snapshot().1.len(), 1);
    }

    #[test]
    fn what_an_instance_left_in_its_spool_is_counted_once() {
        let table = SinkTable::default();
        let old = stats(10, 6);
        old.spooled.add(EventKind::Cuda, 4);
        old.set_spool_pending(EventKind::Cuda, 4);
        table.add("kafka", old, true);
        // The successor opens the spool: the 4 events are received and spooled again there.
        let new = stats(4, 4);
        new.spooled.add(EventKind::Cuda, 4);
        new.replayed.add(EventKind::Cuda, 4);
        table.add("kafka", new, true);
        let kafka = cuda(&table, "kafka");
        assert_eq!(kafka.received, 10);
        assert_eq!(kafka.delivered, 10);
        assert_eq!(kafka.spooled, 4);
        assert_eq!((kafka.spooled_pending, kafka.in_flight), (0, 0));
    }

    #[test]
    fn corrupt_segments_are_counted_across_instances() {
        let table = SinkTable::default();
        let old = stats(1, 0);
        old.drop_corrupt_segment(EventKind::Xid, 3);
        old.drop_corrupt_segment(EventKind::Xid, 1);
        table.add("lake", old, true);
        let new = stats(0, 0);
        new.drop_corrupt_segment(EventKind::Cuda, 2);
        table.add("lake", new, true);
        let health = table.snapshot().1;
        assert_eq!(health.len(), 1);
        assert_eq!(health[0].corrupt_segments, 3);
    }

    #[test]
    fn a_removed_sink_keeps_its_final_counters_and_no_health() {
        let table = SinkTable::default();
        table.add("jsonl", stats(7, 7), false);
        table.retire("jsonl");
        let jsonl = cuda(&table, "jsonl");
        assert_eq!((jsonl.received, jsonl.delivered), (7, 7));
        assert!(table.running().is_empty());
        assert!(table.snapshot().1.is_empty());
    }
}
