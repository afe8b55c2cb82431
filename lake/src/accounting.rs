//! The delivery accounting kept beside the data: JSON documents under `<lake>/_accounting/`,
//! each exactly what `gpuship run --summary-json FILE` writes, summed over the documents of a
//! range. This is what lets a view say how complete the rows it shows are.
//!
//! A document may say which span of time its counters cover with
//! `"window": {"start": RFC 3339, "end": RFC 3339}` (the agent's own documents, one per run,
//! do: `run::ledger`); one that does not is counted in every range. Counters are added as they
//! are, so documents must cover disjoint windows (deltas, not running totals).

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::Deserialize;

use super::range::TimeRange;
use super::Unreadable;

/// Folder of the accounting documents, relative to the lake's root.
pub const ACCOUNTING_PREFIX: &str = "_accounting/";

/// What one sink did with one kind of event, summed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct SinkTotals {
    /// Acknowledged by the destination.
    pub delivered: u64,
    /// Dropped before the destination, all reasons.
    pub dropped: u64,
    /// Dropped, by reason (`buffer_full`, `spool_full`, ...).
    pub dropped_by_reason: BTreeMap<String, u64>,
    /// Lost to destination errors.
    pub failed: u64,
}

/// One BPF ring's counters, summed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct RingTotals {
    /// Records the probes produced (submitted + lost).
    pub emitted: u64,
    /// Records lost because the ring was full.
    pub lost_in_kernel: u64,
}

/// The kernel-log source's counters, summed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct KmsgTotals {
    /// XID lines parsed into rows.
    pub xids: u64,
    /// XID lines that could not be parsed.
    pub parse_errors: u64,
    /// Gaps where the kernel overwrote lines before they were read.
    pub lost_gaps: u64,
}

/// The sum of the accounting documents of a range.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AccountingTotals {
    /// Documents counted.
    pub documents: usize,
    /// Documents whose window lies outside the range.
    pub outside_range: usize,
    /// Documents that could not be read or parsed, with why.
    pub unreadable: Vec<Unreadable>,
    /// Per (sink, kind).
    pub sinks: BTreeMap<(String, String), SinkTotals>,
    /// Per ring (`xid`, `cuda`, `driver`).
    pub rings: BTreeMap<String, RingTotals>,
    /// The kernel log.
    pub kmsg: KmsgTotals,
}

/// The parts of a `--summary-json` document this reads; everything else is ignored.
#[derive(Debug, Deserialize)]
struct Document {
    accounting: Counters,
    #[serde(default)]
    window: Option<Window>,
}

#[derive(Debug, Deserialize)]
struct Counters {
    #[serde(default)]
    rings: Vec<RingEntry>,
    #[serde(default)]
    sinks: Vec<SinkEntry>,
    #[serde(default)]
    kmsg: KmsgTotals,
}

#[derive(Debug, Deserialize)]
struct RingEntry {
    ring: String,
    #[serde(flatten)]
    totals: RingTotals,
}

#[derive(Debug, Deserialize)]
struct SinkEntry {
    sink: String,
    kind: String,
    #[serde(flatten)]
    totals: SinkTotals,
}

#[derive(Debug, Deserialize)]
struct Window {
    start: String,
    end: String,
}

impl Window {
    fn span(&self) -> Option<(DateTime<Utc>, DateTime<Utc>)> {
        let parse = |text: &str| {
            DateTime::parse_from_rfc3339(text)
                .ok()
                .map(|t| t.with_timezone(&Utc))
        };
        Some((parse(&self.start)?, parse(&self.end)?))
    }
}

impl AccountingTotals {
    /// Adds one document (its text) if its window overlaps `range`.
    pub fn add_document(&mut self, key: &str, text: &[u8], range: &TimeRange) {
        let document: Document = match serde_json::from_slice(text) {
            Ok(document) => document,
            Err(err) => {
                self.unreadable.push(Unreadable {
                    key: key.to_string(),
                    error: format!("not a gpuship summary document: {err}"),
                });
                return;
            }
        };
        if let Some(window) = &document.window {
            let Some((start, end)) = window.span() else {
                self.unreadable.push(Unreadable {
                    key: key.to_string(),
                    error: format!(
                        "window {:?} to {:?} is not two RFC 3339 timestamps",
                        window.start, window.end
                    ),
                });
                return;
            };
            if !range.overlaps(start, end) {
                self.outside_range += 1;
                return;
            }
        }
        self.documents += 1;
        let kmsg = &document.accounting.kmsg;
        self.kmsg.xids += kmsg.xids;
        self.kmsg.parse_errors += kmsg.parse_errors;
        self.kmsg.lost_gaps += kmsg.lost_gaps;
        for ring in document.accounting.rings {
            let total = self.rings.entry(ring.ring).or_default();
            total.emitted += ring.totals.emitted;
            total.lost_in_kernel += ring.totals.lost_in_kernel;
        }
        for sink in document.accounting.sinks {
            let total = self.sinks.entry((sink.sink, sink.kind)).or_default();
            total.delivered += sink.totals.delivered;
            total.dropped += sink.totals.dropped;
            total.failed += sink.totals.failed;
            for (reason, count) in sink.totals.dropped_by_reason {
                *total.dropped_by_reason.entry(reason).or_default() += count;
            }
        }
    }

    /// Events delivered by every sink, all kinds.
    pub fn delivered(&self) -> u64 {
        self.sinks.values().map(|s| s.delivered).sum()
    }

    /// Events dropped by every sink, all kinds and reasons.
    pub fn dropped(&self) -> u64 {
        self.sinks.values().map(|s| s.dropped).sum()
    }

    /// Records lost in the kernel, all rings.
    pub fn lost_in_kernel(&self) -> u64 {
        self.rings.values().map(|r| r.lost_in_kernel).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::range::range_of as range;

    const DOC: &str = r#"{
      "sources": [["cuda_uprobes", true, "ok"]],
      "accounting": {
        "rings": [
          {"ring": "xid", "emitted": 2, "lost_in_kernel": 0, "pending_in_ring": 0, "received": 2,
           "decode_errors": 0, "unmatched_returns": 0, "inflight_full": 0},
          {"ring": "cuda", "emitted": 100, "lost_in_kernel": 3, "pending_in_ring": 0,
           "received": 97, "decode_errors": 0, "unmatched_returns": 0, "inflight_full": 0}
        ],
        "kmsg": {"xids": 4, "unpaired_tracepoint": 0, "unpaired_kmsg": 0, "parse_errors": 0, "lost_gaps": 1},
        "sinks": [
          {"sink": "parquet", "kind": "cuda", "received": 97, "delivered": 90, "dropped": 7,
           "dropped_by_reason": {"buffer_full": 5, "spool_full": 2}, "spooled": 0, "replayed": 0,
           "spooled_pending": 0, "filtered": 0, "failed": 0, "in_flight": 0, "queued_events": 0}
        ],
        "sink_health": []
      },
      "summary": {"calls": {}, "bytes_allocated": 0, "bytes_copied": 0, "failures": {}, "xids": {}},
      "command_exit_code": null
    }"#;

    #[test]
    fn documents_without_a_window_count_in_every_range_and_add_up() {
        let mut totals = AccountingTotals::default();
        let r = range("1h", "0s");
        totals.add_document("_accounting/a.json", DOC.as_bytes(), &r);
        totals.add_document("_accounting/b.json", DOC.as_bytes(), &r);
        assert_eq!(totals.documents, 2);
        let sink = &totals.sinks[&("parquet".to_string(), "cuda".to_string())];
        assert_eq!((sink.delivered, sink.dropped), (180, 14));
        assert_eq!(sink.dropped_by_reason["buffer_full"], 10);
        assert_eq!(sink.dropped_by_reason["spool_full"], 4);
        assert_eq!(totals.rings["cuda"].emitted, 200);
        assert_eq!(totals.lost_in_kernel(), 6);
        assert_eq!((totals.delivered(), totals.dropped()), (180, 14));
        assert_eq!((totals.kmsg.xids, totals.kmsg.lost_gaps), (8, 2));
    }

    #[test]
    fn a_window_outside_the_range_is_left_out_and_garbage_is_reported() {
        let mut with_window: serde_json::Value = serde_json::from_str(DOC).unwrap();
        with_window["window"] = serde_json::json!({
            "start": "2026-11-22T03:00:00Z", "end": "2026-11-22T03:10:00Z"
        });
        let text = serde_json::to_vec(&with_window).unwrap();
        let mut totals = AccountingTotals::default();
        totals.add_document(
            "_accounting/w.json",
            &text,
            &range("2026-11-22T04:00:00Z", "2026-11-22T05:00:00Z"),
        );
        totals.add_document(
            "_accounting/w.json",
            &text,
            &range("2026-11-22T03:05:00Z", "2026-11-22T05:00:00Z"),
        );
        totals.add_document("_accounting/bad.json", b"{not json", &range("1h", "0s"));
        assert_eq!((totals.documents, totals.outside_range), (1, 1));
        assert_eq!(totals.unreadable.len(), 1);
        assert_eq!(totals.unreadable[0].key, "_accounting/bad.json");
    }
}
