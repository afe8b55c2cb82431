//! Two sources, one record: the driver's tracepoint and the kernel log report the same XID with
//! different details (the tracepoint: full bus id with function, full message, the IRQ thread as
//! reporter; the log: the faulting process's pid and name, a sequence number). A report waits
//! here at most `window` for its twin from the other source; a pair becomes one record with
//! `source = both`, each side's raw text kept. With only one source running nothing waits.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use gpuship_sinks::schema::{XidRecord, XidSource};

/// Pairs tracepoint and kernel-log reports of the same XID.
#[derive(Debug)]
pub struct Reconciler {
    window: Duration,
    /// Both sources run, so a report may have a twin coming.
    pairing: bool,
    pending: VecDeque<(XidRecord, Instant)>,
}

/// Whether two reports describe the same XID: same code and GPU, the same driver text (one may
/// be cut short by the capture buffer), close in time.
fn twins(a: &XidRecord, b: &XidRecord, window: Duration) -> bool {
    a.source != b.source
        && a.code == b.code
        && a.pci_bus_id == b.pci_bus_id
        && u128::from(a.time_ns.abs_diff(b.time_ns)) <= window.as_nanos()
        && (a.message == b.message
            || (a.message_truncated && b.message.starts_with(&a.message))
            || (b.message_truncated && a.message.starts_with(&b.message)))
}

/// One record from a tracepoint report and a kernel-log report of the same XID.
pub fn merge(first: XidRecord, second: XidRecord) -> XidRecord {
    let (tracepoint, kmsg) = if first.source == XidSource::Tracepoint {
        (first, second)
    } else {
        (second, first)
    };
    XidRecord {
        // The tracepoint fires first, in the driver; the log line is written just after.
        time_ns: tracepoint.time_ns.min(kmsg.time_ns),
        source: XidSource::Both,
        pid: kmsg.pid,
        comm: kmsg.comm,
        kmsg_seq: kmsg.kmsg_seq,
        raw_kmsg: kmsg.raw_kmsg,
        // MIG instances come with the log line's bus id.
        annotations: kmsg.annotations,
        gpu: tracepoint.gpu.or(kmsg.gpu),
        ..tracepoint
    }
}

impl Reconciler {
    /// `pairing`: both sources are running.
    pub fn new(window: Duration, pairing: bool) -> Self {
        Self {
            window,
            pairing,
            pending: VecDeque::new(),
        }
    }

    /// A new report: returns the record to emit now (the merged pair, or the report itself when
    /// no twin can come), or nothing while it waits for its twin.
    pub fn offer(&mut self, record: XidRecord, now: Instant) -> Option<XidRecord> {
        if !self.pairing {
            return Some(record);
        }
        let twin = self
            .pending
            .iter()
            .position(|(waiting, _)| twins(waiting, &record, self.window));
        match twin {
            Some(index) => {
                let (waiting, _) = self.pending.remove(index).expect("index from position");
                Some(merge(waiting, record))
            }
            None => {
                self.pending.push_back((record, now));
                None
            }
        }
    }

    /// Reports whose window has passed without a twin, oldest first.
    pub fn expired(&mut self, now: Instant) -> Vec<XidRecord> {
        let mut out = Vec::new();
        while let Some((_, arrived)) = self.pending.front() {
            if now.duration_since(*arrived) < self.window {
                break;
            }
            out.push(self.pending.pop_front().expect("front exists").0);
        }
        out
    }

    /// Everything still waiting (at shutdown).
    pub fn drain(&mut self) -> Vec<XidRecord> {
        self.pending.drain(..).map(|(record, _)| record).collect()
    }

    /// When the oldest waiting report expires.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.pending
            .front()
            .map(|(_, arrived)| gpuship_sinks::limits::instant_after(*arrived, self.window))
    }

    /// Reports waiting for a twin.
    pub fn waiting(&self) -> usize {
        self.pending.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MSG: &str = "channel 0x0000000a, intr 00000000. MMU Fault: ENGINE GRAPHICS GPC1 GPCCLIENT_T1_8 faulted @ 0x7f00_00000000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_WRITE";

    fn tracepoint(time_ns: i64) -> XidRecord {
        XidRecord {
            time_ns,
            code: 31,
            pci_bus_id: "0000:00:06.0".into(),
            message: MSG.into(),
            source: XidSource::Tracepoint,
            reporter_pid: Some(401),
            reporter_comm: Some("irq/44-nvidia".into()),
            raw_tracepoint: Some(format!("Xid (PCI:0000:00:06.0): 31, {MSG}")),
            ..XidRecord::new(XidSource::Tracepoint)
        }
    }

    fn kmsg(time_ns: i64, seq: u64) -> XidRecord {
        XidRecord {
            time_ns,
            code: 31,
            pci_bus_id: "0000:00:06.0".into(),
            message: MSG.into(),
            source: XidSource::Kmsg,
            pid: Some(468),
            comm: Some("python3".into()),
            kmsg_seq: Some(seq),
            raw_kmsg: Some(format!(
                "NVRM: Xid (PCI:0000:00:06): 31, pid=468, name=python3, {MSG}"
            )),
            ..XidRecord::new(XidSource::Kmsg)
        }
    }

    #[test]
    fn a_huge_window_does_not_overflow_the_deadline() {
        let now = Instant::now();
        let mut reconciler = Reconciler::new(Duration::from_millis(u64::MAX), true);
        assert!(reconciler.offer(tracepoint(1_000_000), now).is_none());
        let deadline = reconciler.next_deadline().expect("one waiting");
        assert!(deadline > now);
        assert!(reconciler.expired(now).is_empty());
        let merged = reconciler.offer(kmsg(i64::MAX, 1), now);
        assert!(merged.is_some(), "any gap is within a window this long");
    }

    #[test]
    fn a_pair_becomes_one_record_with_both_sides() {
        let now = Instant::now();
        let mut reconciler = Reconciler::new(Duration::from_secs(1), true);
        assert!(reconciler.offer(tracepoint(1_000_000), now).is_none());
        let merged = reconciler.offer(kmsg(1_600_000, 77), now).expect("pair");
        assert_eq!(merged.source, XidSource::Both);
        assert_eq!(merged.time_ns, 1_000_000);
        assert_eq!(merged.pid, Some(468));
        assert_eq!(merged.comm.as_deref(), Some("python3"));
        assert_eq!(merged.reporter_comm.as_deref(), Some("irq/44-nvidia"));
        assert_eq!(merged.kmsg_seq, Some(77));
        assert!(merged
            .raw_tracepoint
            .unwrap()
            .starts_with("Xid (PCI:0000:00:06.0): 31"));
        assert!(merged.raw_kmsg.unwrap().contains("pid=468"));
        assert_eq!(reconciler.waiting(), 0);
    }

    #[test]
    fn the_log_line_may_come_first_and_duplicates_pair_in_order() {
        let now = Instant::now();
        let mut reconciler = Reconciler::new(Duration::from_secs(1), true);
        assert!(reconciler.offer(kmsg(10, 1), now).is_none());
        assert!(reconciler.offer(kmsg(20, 2), now).is_none());
        let first = reconciler.offer(tracepoint(5), now).unwrap();
        assert_eq!(first.kmsg_seq, Some(1));
        let second = reconciler.offer(tracepoint(15), now).unwrap();
        assert_eq!(second.kmsg_seq, Some(2));
    }

    #[test]
    fn different_xids_do_not_pair_and_leave_after_the_window() {
        let start = Instant::now();
        let mut reconciler = Reconciler::new(Duration::from_millis(500), true);
        let mut other_gpu = kmsg(10, 3);
        other_gpu.pci_bus_id = "0000:3b:00.0".into();
        let mut other_code = kmsg(10, 4);
        other_code.code = 13;
        let mut two_seconds_later = kmsg(2_000_000_000, 5);
        two_seconds_later.message = MSG.into();
        assert!(reconciler.offer(tracepoint(0), start).is_none());
        assert!(reconciler.offer(other_gpu, start).is_none());
        assert!(reconciler.offer(other_code, start).is_none());
        assert!(reconciler.offer(two_seconds_later, start).is_none());
        assert_eq!(reconciler.waiting(), 4);
        assert!(reconciler
            .expired(start + Duration::from_millis(499))
            .is_empty());
        assert_eq!(
            reconciler.next_deadline(),
            Some(start + Duration::from_millis(500))
        );
        let left = reconciler.expired(start + Duration::from_millis(500));
        let sources: Vec<XidSource> = left.iter().map(|r| r.source).collect();
        assert_eq!(
            sources,
            [
                XidSource::Tracepoint,
                XidSource::Kmsg,
                XidSource::Kmsg,
                XidSource::Kmsg
            ]
        );
    }

    #[test]
    fn a_truncated_message_still_pairs() {
        let now = Instant::now();
        let mut reconciler = Reconciler::new(Duration::from_secs(1), true);
        let mut cut = tracepoint(0);
        cut.message = MSG[..40].to_string();
        cut.message_truncated = true;
        assert!(reconciler.offer(cut, now).is_none());
        let merged = reconciler.offer(kmsg(100, 9), now).unwrap();
        assert_eq!(merged.source, XidSource::Both);
    }

    #[test]
    fn with_one_source_nothing_waits() {
        let mut reconciler = Reconciler::new(Duration::from_secs(1), false);
        let record = reconciler.offer(kmsg(1, 1), Instant::now()).unwrap();
        assert_eq!(record.source, XidSource::Kmsg);
        assert_eq!(reconciler.waiting(), 0);
    }
}
