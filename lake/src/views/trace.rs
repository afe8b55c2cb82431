//! `gpuship export-trace`: the lake's rows of a range as a Chrome/Perfetto trace-event JSON
//! document (`{"traceEvents": [...], "displayTimeUnit": "ns"}`), to open in ui.perfetto.dev or
//! chrome://tracing.
//!
//! - CUDA calls are complete events (`ph: X`) on their process and thread; entry-only calls
//!   (no duration, result `NOT_CAPTURED`) are thread-scoped instant events (`ph: i`). Calls the
//!   flight recorder wrote are on a track of their own per thread ([`calls`]).
//! - Driver operations are complete events on a track of their own per thread: tid
//!   `DRIVER_TRACK_BASE + tid`, above any real Linux tid.
//! - XIDs are global instant events (`s: g`) on pseudo-process 0 ("GPUs"), one thread per GPU;
//!   an XID's suspect kernels are instants on its GPU's thread at their launch times, and are
//!   listed in its args ([`suspects`]).
//! - `cuda_stats` rows (stats mode, whose single calls are not known) are counter tracks per
//!   process and function: calls per second and mean/p99 latency per interval ([`counters`]).
//!
//! Times are microseconds (with nanosecond fractions) after the earliest exported event, whose
//! wall-clock time is in `otherData.origin_time`: absolute epoch microseconds do not fit a JSON
//! double with nanoseconds intact.

mod args;
pub mod calls;
pub mod counters;
mod names;
pub mod suspects;

use serde_json::{json, Map, Value};

use super::cuda_stats::CudaStats;
use super::rows::{CudaCall, DriverOp, Xid};
use args::{driver_name, hex, xid_args};
use names::Names;

/// Thread ids of driver tracks start here (Linux tids stay below 2^22).
pub const DRIVER_TRACK_BASE: i64 = 1 << 30;
/// The pseudo-process holding one XID track per GPU (pid 0 never makes CUDA calls).
pub const GPU_PID: i64 = 0;

/// How many events of each sort a trace holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TraceCounts {
    /// CUDA calls with a duration (`X`).
    pub cuda_complete: usize,
    /// Entry-only CUDA calls (`i`).
    pub cuda_instant: usize,
    /// CUDA calls (of both sorts above) the flight recorder wrote.
    pub flight_recorder: usize,
    /// XIDs (`i`, global).
    pub xid: usize,
    /// Suspect kernels of XIDs (`i`, on the GPU's track).
    pub suspects: usize,
    /// Driver operations (`X`).
    pub driver: usize,
    /// Process and thread names (`M`).
    pub metadata: usize,
    /// Counter events (`C`) of `cuda_stats` rows.
    pub counters: usize,
    /// `cuda_stats` rows drawn as counters.
    pub stats_rows: usize,
}

impl TraceCounts {
    /// Every event.
    pub fn total(&self) -> usize {
        self.cuda_complete
            + self.cuda_instant
            + self.xid
            + self.suspects
            + self.driver
            + self.metadata
            + self.counters
    }
}

/// The rows a trace is made of.
#[derive(Debug, Clone, Copy)]
pub struct Rows<'a> {
    pub calls: &'a [CudaCall],
    pub xids: &'a [Xid],
    pub driver: &'a [DriverOp],
    pub stats: &'a [CudaStats],
}

/// One event with the integer sort keys it is ordered by.
struct Event {
    at_ns: i64,
    dur_ns: u64,
    value: Value,
}

fn micros(ns: i64) -> f64 {
    ns as f64 / 1_000.0
}

/// The trace's events as they are made, with what names them.
struct Builder {
    origin: i64,
    counts: TraceCounts,
    names: Names,
    events: Vec<Event>,
}

impl Builder {
    fn push(&mut self, at_ns: i64, dur_ns: u64, value: Value) {
        self.events.push(Event {
            at_ns,
            dur_ns,
            value,
        });
    }

    fn driver(&mut self, driver: &[DriverOp]) {
        for op in driver {
            let (pid, tid) = (i64::from(op.pid), DRIVER_TRACK_BASE + i64::from(op.tid));
            self.names.saw(pid, i64::from(op.tid), &op.comm, tid, || {
                format!("{} (tid {}) driver", op.comm, op.tid)
            });
            self.counts.driver += 1;
            let at_ns = op.time_ns.saturating_sub(self.origin);
            let value = json!({
                "name": driver_name(op), "cat": "driver", "ph": "X", "ts": micros(at_ns),
                "dur": op.duration_ns as f64 / 1_000.0, "pid": pid, "tid": tid,
                "args": {
                    "hook": op.hook, "device": op.device, "request": op.request.map(|r| hex(u64::from(r))),
                    "result": op.result, "comm": op.comm, "tid": op.tid,
                },
            });
            self.push(at_ns, op.duration_ns, value);
        }
    }

    fn counters(&mut self, counters: &counters::Counters<'_>) {
        self.counts.stats_rows = counters.rows;
        for sample in &counters.samples {
            let at_ns = sample.at_ns.saturating_sub(self.origin);
            for value in counters::events(sample, at_ns) {
                self.counts.counters += 1;
                self.push(at_ns, 0, value);
            }
        }
        for (&pid, comm) in &counters.comms {
            self.names.process(i64::from(pid), comm);
        }
    }

    fn xids(&mut self, xids: &[Xid]) {
        for xid in xids {
            let tid = self.names.gpu(xid);
            self.counts.xid += 1;
            let at_ns = xid.time_ns.saturating_sub(self.origin);
            let value = json!({
                "name": format!("XID {} ({})", xid.code, xid.display_name()), "cat": "xid", "ph": "i",
                "s": "g", "ts": micros(at_ns), "pid": GPU_PID, "tid": tid, "args": xid_args(xid),
            });
            self.push(at_ns, 0, value);
        }
    }
}

/// The trace document of these rows, and what it holds. `context` goes to `otherData`.
pub fn build(rows: Rows<'_>, context: Map<String, Value>) -> (Value, TraceCounts) {
    let counters = counters::counters(rows.stats);
    let first = rows
        .calls
        .iter()
        .map(|c| c.time_ns)
        .chain(rows.xids.iter().map(|x| x.time_ns))
        .chain(rows.driver.iter().map(|d| d.time_ns))
        .chain(counters.samples.iter().map(|s| s.at_ns))
        .chain(suspects::times(rows.xids))
        .min();
    let mut builder = Builder {
        origin: first.unwrap_or(0),
        counts: TraceCounts::default(),
        names: Names::default(),
        events: Vec::with_capacity(rows.calls.len() + rows.xids.len() + rows.driver.len()),
    };
    builder.calls(rows.calls);
    builder.driver(rows.driver);
    builder.counters(&counters);
    builder.xids(rows.xids);
    builder.suspects(rows.xids);
    let Builder {
        mut counts,
        names,
        mut events,
        ..
    } = builder;

    // Parents before children at the same start: earlier first, then longer first.
    events.sort_by(|a, b| a.at_ns.cmp(&b.at_ns).then(b.dur_ns.cmp(&a.dur_ns)));
    let mut trace = names.metadata(GPU_PID);
    counts.metadata = trace.len();
    trace.extend(events.into_iter().map(|e| e.value));

    let mut other = context;
    // With no event there is no origin to state.
    other.insert("origin_time_ns".into(), json!(first));
    other.insert(
        "origin_time".into(),
        json!(first.map(|ns| chrono::DateTime::from_timestamp_nanos(ns)
            .to_rfc3339_opts(chrono::SecondsFormat::Nanos, true))),
    );
    let document = json!({"traceEvents": trace, "displayTimeUnit": "ns", "otherData": other});
    (document, counts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::views::cuda_stats::cuda_stats;
    use crate::views::fixtures::{
        cuda_batch, cuda_row, stats_batch, stats_row, xid_batch, xid_record,
    };
    use crate::views::rows::{cuda_calls, xids};

    #[test]
    fn calls_xids_and_names_become_trace_events() {
        let calls = cuda_calls(&[cuda_batch(&[
            cuda_row(1_000_000_000, "cuCtxSynchronize", 700, 1_500),
            cuda_row(1_000_002_000, "cuLaunchKernel", 0, 0),
        ])]);
        let xids = xids(&[xid_batch(&[xid_record(
            1_000_001_000,
            31,
            "0000:3b:00.0",
            "error",
            "fault",
        )])]);
        let (trace, counts) = build(
            Rows {
                calls: &calls,
                xids: &xids,
                driver: &[],
                stats: &[],
            },
            Map::new(),
        );
        assert_eq!(
            counts,
            TraceCounts {
                cuda_complete: 1,
                cuda_instant: 1,
                flight_recorder: 0,
                xid: 1,
                suspects: 0,
                driver: 0,
                metadata: 4,
                counters: 0,
                stats_rows: 0,
            }
        );
        let events = trace["traceEvents"].as_array().unwrap();
        assert_eq!(events.len(), counts.total());
        assert_eq!(trace["displayTimeUnit"], "ns");
        assert_eq!(trace["otherData"]["origin_time_ns"], 1_000_000_000);
        let find = |name: &str| events.iter().find(|e| e["name"] == name).unwrap();
        let sync = find("cuCtxSynchronize");
        assert_eq!(
            (
                sync["ph"].as_str(),
                sync["ts"].as_f64(),
                sync["dur"].as_f64()
            ),
            (Some("X"), Some(0.0), Some(1.5))
        );
        assert_eq!(sync["args"]["result"], "CUDA_ERROR_ILLEGAL_ADDRESS");
        assert_eq!(sync["args"]["stream"], "0x5000");
        let launch = find("cuLaunchKernel");
        assert_eq!(
            (launch["ph"].as_str(), launch["s"].as_str()),
            (Some("i"), Some("t"))
        );
        assert_eq!(launch["ts"].as_f64(), Some(2.0));
        assert_eq!(launch["args"]["grid"], json!([1, 2, 3]));
        let xid = find("XID 31 (GPU MMU page fault)");
        assert_eq!(
            (xid["ph"].as_str(), xid["s"].as_str(), xid["pid"].as_i64()),
            (Some("i"), Some("g"), Some(0))
        );
        assert_eq!(xid["args"]["severity"], "error");
        assert_eq!(xid["args"]["pci_bus_id"], "0000:3b:00.0");
        let process = events
            .iter()
            .find(|e| e["ph"] == "M" && e["pid"] == 100)
            .unwrap();
        assert_eq!(process["args"]["name"], "train (pid 100)");
        assert!(events
            .iter()
            .any(|e| e["name"] == "thread_name" && e["args"]["name"] == "train (tid 101)"));
    }

    #[test]
    fn driver_operations_get_their_own_track() {
        let op = DriverOp {
            time_ns: 10_000,
            host: "h".into(),
            pid: 7,
            tid: 8,
            comm: "python3".into(),
            hook: "ioctl".into(),
            device: Some("nvidiactl".into()),
            request: Some(0xc020_462a),
            request_name: Some("NV_ESC_RM_CONTROL".into()),
            duration_ns: 2_500,
            result: Some(0),
        };
        let (trace, counts) = build(
            Rows {
                calls: &[],
                xids: &[],
                driver: &[op],
                stats: &[],
            },
            Map::new(),
        );
        assert_eq!(counts.driver, 1);
        let events = trace["traceEvents"].as_array().unwrap();
        let event = events.iter().find(|e| e["ph"] == "X").unwrap();
        assert_eq!(event["name"], "NV_ESC_RM_CONTROL");
        assert_eq!(event["tid"].as_i64(), Some(DRIVER_TRACK_BASE + 8));
        assert_eq!(event["dur"].as_f64(), Some(2.5));
        assert!(events
            .iter()
            .any(|e| e["ph"] == "M" && e["tid"] == event["tid"]));
    }

    /// Stats mode: launches only as an aggregate (of a process with a hostile name), a failed
    /// call of another process as a slice with its incident.
    #[test]
    fn aggregates_are_counters_beside_the_slices_of_rows() {
        let mut row = stats_row(20_000_000_000, "cuLaunchKernel", 20, &[(896, 1_024, 20)]);
        row.pid = 300;
        row.comm = "q\"\n\u{1b}[2J<b>".into();
        let stats = cuda_stats(&[stats_batch(&[row])]);
        let mut calls = cuda_calls(&[cuda_batch(&[cuda_row(
            15_000_000_000,
            "cuCtxSynchronize",
            700,
            1_000,
        )])]);
        calls[0].incident_id = Some("node-a/0000:3b:00.0/1".into());
        let rows = Rows {
            calls: &calls,
            xids: &[],
            driver: &[],
            stats: &stats,
        };
        let (trace, counts) = build(rows, Map::new());
        assert_eq!(
            counts,
            TraceCounts {
                cuda_complete: 1,
                cuda_instant: 0,
                flight_recorder: 0,
                xid: 0,
                suspects: 0,
                driver: 0,
                metadata: 3,
                counters: 6,
                stats_rows: 1,
            }
        );
        assert_eq!(trace["otherData"]["origin_time_ns"], 10_000_000_000i64);
        let events = trace["traceEvents"].as_array().unwrap();
        let at = |name: &str, ts: f64| {
            events
                .iter()
                .find(|e| e["name"] == name && e["ts"].as_f64() == Some(ts))
                .unwrap_or_else(|| panic!("{name} at {ts}"))
        };
        let rate = at("cuLaunchKernel calls", 0.0);
        assert_eq!(
            (&rate["ph"], &rate["cat"], &rate["pid"], &rate["tid"]),
            (&json!("C"), &json!("cuda_stats"), &json!(300), &json!(300))
        );
        assert_eq!(rate["args"], json!({"per s": 2.0}));
        // Its latencies, and the drop to zero at the interval's end: trace/counters.rs.
        assert!(events
            .iter()
            .any(|e| e["name"] == "cuLaunchKernel p99 latency"));
        let sync = at("cuCtxSynchronize", 5_000_000.0);
        assert_eq!(sync["ph"], "X");
        assert_eq!(sync["args"]["incident_id"], "node-a/0000:3b:00.0/1");
        let text = serde_json::to_string(&trace).unwrap();
        assert!(
            text.contains(r#""name":"q\"\n\u001b[2J<b> (pid 300)""#),
            "{text}"
        );
        assert!(!text.chars().any(|c| c.is_control()), "{text}");
    }
}
