//! `gpuship export-trace`: the lake's rows of a range as a Chrome/Perfetto trace-event JSON
//! document (`{"traceEvents": [...], "displayTimeUnit": "ns"}`), to open in ui.perfetto.dev or
//! chrome://tracing.
//!
//! - CUDA calls are complete events (`ph: X`) on their process and thread; entry-only calls
//!   (no duration, result `NOT_CAPTURED`) are thread-scoped instant events (`ph: i`).
//! - Driver operations are complete events on a track of their own per thread: tid
//!   `DRIVER_TRACK_BASE + tid`, above any real Linux tid.
//! - XIDs are global instant events (`s: g`) on pseudo-process 0 ("GPUs"), one thread per GPU.
//!
//! Times are microseconds (with nanosecond fractions) after the earliest exported event, whose
//! wall-clock time is in `otherData.origin_time`: absolute epoch microseconds do not fit a JSON
//! double with nanoseconds intact.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use super::rows::{CudaCall, DriverOp, Xid};

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
    /// XIDs (`i`, global).
    pub xid: usize,
    /// Driver operations (`X`).
    pub driver: usize,
    /// Process and thread names (`M`).
    pub metadata: usize,
}

impl TraceCounts {
    /// Every event.
    pub fn total(&self) -> usize {
        self.cuda_complete + self.cuda_instant + self.xid + self.driver + self.metadata
    }
}

/// Names of processes and threads, from the rows that mention them.
#[derive(Default)]
struct Names {
    /// pid -> (comm of its main thread if seen, else the first comm seen).
    processes: BTreeMap<i64, (bool, String)>,
    threads: BTreeMap<(i64, i64), String>,
}

impl Names {
    /// A row of thread `tid` of `pid`, named `comm`, drawn on track `(pid, track)`.
    fn saw(&mut self, pid: i64, tid: i64, comm: &str, track: i64, name: impl FnOnce() -> String) {
        let main = pid == tid;
        let entry = self
            .processes
            .entry(pid)
            .or_insert_with(|| (main, comm.to_string()));
        if main && !entry.0 {
            *entry = (true, comm.to_string());
        }
        self.threads.entry((pid, track)).or_insert_with(name);
    }
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

fn hex(value: u64) -> String {
    format!("{value:#x}")
}

fn cuda_args(call: &CudaCall) -> Map<String, Value> {
    let mut args = Map::new();
    args.insert("result".into(), json!(call.result_name));
    args.insert("result_code".into(), json!(call.result));
    args.insert("comm".into(), json!(call.comm));
    if let Some(bytes) = call.bytes {
        args.insert("bytes".into(), json!(bytes));
    }
    if let Some(ptr) = call.device_ptr {
        args.insert("device_ptr".into(), json!(hex(ptr)));
    }
    if let Some(stream) = call.stream {
        args.insert("stream".into(), json!(hex(stream)));
    }
    if let Some(grid) = call.grid {
        args.insert("grid".into(), json!(grid));
    }
    if let Some(block) = call.block {
        args.insert("block".into(), json!(block));
    }
    if let Some(shared) = call.shared_mem_bytes {
        args.insert("shared_mem_bytes".into(), json!(shared));
    }
    if let Some(incident) = &call.incident_id {
        args.insert("incident_id".into(), json!(incident));
    }
    args
}

fn xid_args(xid: &Xid) -> Value {
    json!({
        "code": xid.code,
        "pci_bus_id": xid.pci_bus_id,
        "gpu_uuid": xid.gpu_uuid,
        "message": xid.message,
        "severity": xid.display_severity(),
        "action": xid.display_action(),
        "pid": xid.pid,
        "comm": xid.comm,
        "pod": xid.pod,
        "attribution": xid.attribution,
        "affected_pids": xid.affected_pids,
        "incident_id": xid.incident_id,
        "root_candidate": xid.root_candidate,
        "host": xid.host,
    })
}

fn driver_name(op: &DriverOp) -> String {
    match (&op.request_name, op.request) {
        (Some(name), _) => name.clone(),
        (None, Some(request)) => format!("{} {}", op.hook, hex(u64::from(request))),
        (None, None) => op.hook.clone(),
    }
}

/// The trace document of these rows, and what it holds. `context` goes to `otherData`.
pub fn build(
    calls: &[CudaCall],
    xids: &[Xid],
    driver: &[DriverOp],
    context: Map<String, Value>,
) -> (Value, TraceCounts) {
    let first = calls
        .iter()
        .map(|c| c.time_ns)
        .chain(xids.iter().map(|x| x.time_ns))
        .chain(driver.iter().map(|d| d.time_ns))
        .min();
    let origin = first.unwrap_or(0);
    let mut counts = TraceCounts::default();
    let mut names = Names::default();
    let mut events = Vec::with_capacity(calls.len() + xids.len() + driver.len());

    for call in calls {
        let (pid, tid) = (i64::from(call.pid), i64::from(call.tid));
        names.saw(pid, tid, &call.comm, tid, || {
            format!("{} (tid {tid})", call.comm)
        });
        let at_ns = call.time_ns - origin;
        let mut value = json!({
            "name": call.function, "cat": "cuda", "ts": micros(at_ns), "pid": pid, "tid": tid,
            "args": cuda_args(call),
        });
        if call.entry_only() {
            counts.cuda_instant += 1;
            value["ph"] = json!("i");
            value["s"] = json!("t");
        } else {
            counts.cuda_complete += 1;
            value["ph"] = json!("X");
            value["dur"] = json!(call.duration_ns as f64 / 1_000.0);
        }
        events.push(Event {
            at_ns,
            dur_ns: call.duration_ns,
            value,
        });
    }

    for op in driver {
        let (pid, tid) = (i64::from(op.pid), DRIVER_TRACK_BASE + i64::from(op.tid));
        names.saw(pid, i64::from(op.tid), &op.comm, tid, || {
            format!("{} (tid {}) driver", op.comm, op.tid)
        });
        counts.driver += 1;
        let at_ns = op.time_ns - origin;
        let value = json!({
            "name": driver_name(op), "cat": "driver", "ph": "X", "ts": micros(at_ns),
            "dur": op.duration_ns as f64 / 1_000.0, "pid": pid, "tid": tid,
            "args": {
                "hook": op.hook, "device": op.device, "request": op.request.map(|r| hex(u64::from(r))),
                "result": op.result, "comm": op.comm, "tid": op.tid,
            },
        });
        events.push(Event {
            at_ns,
            dur_ns: op.duration_ns,
            value,
        });
    }

    let mut gpus: BTreeMap<(String, String), (i64, Option<String>)> = BTreeMap::new();
    for xid in xids {
        let next = gpus.len() as i64 + 1;
        let gpu = gpus
            .entry((xid.host.clone(), xid.pci_bus_id.clone()))
            .or_insert((next, None));
        if gpu.1.is_none() {
            gpu.1 = xid.gpu_model.clone();
        }
        counts.xid += 1;
        let at_ns = xid.time_ns - origin;
        let value = json!({
            "name": format!("XID {} ({})", xid.code, xid.display_name()), "cat": "xid", "ph": "i",
            "s": "g", "ts": micros(at_ns), "pid": GPU_PID, "tid": gpu.0, "args": xid_args(xid),
        });
        events.push(Event {
            at_ns,
            dur_ns: 0,
            value,
        });
    }

    // Parents before children at the same start: earlier first, then longer first.
    events.sort_by(|a, b| a.at_ns.cmp(&b.at_ns).then(b.dur_ns.cmp(&a.dur_ns)));

    let mut trace = Vec::with_capacity(events.len() + names.threads.len() * 2);
    let meta = |name: &str, pid: i64, tid: i64, value: &str| json!({"name": name, "ph": "M", "ts": 0, "pid": pid, "tid": tid, "args": {"name": value}});
    if !gpus.is_empty() {
        trace.push(meta("process_name", GPU_PID, 0, "GPUs (XIDs)"));
    }
    for ((host, bus), (tid, model)) in &gpus {
        let model = model
            .as_deref()
            .map(|m| format!(" {m}"))
            .unwrap_or_default();
        trace.push(meta(
            "thread_name",
            GPU_PID,
            *tid,
            &format!("GPU {bus}{model} on {host}"),
        ));
    }
    for (pid, (_, comm)) in &names.processes {
        trace.push(meta(
            "process_name",
            *pid,
            *pid,
            &format!("{comm} (pid {pid})"),
        ));
    }
    for ((pid, tid), name) in &names.threads {
        trace.push(meta("thread_name", *pid, *tid, name));
    }
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
    use crate::views::fixtures::{cuda_batch, cuda_row, xid_batch, xid_record};
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
        let (trace, counts) = build(&calls, &xids, &[], Map::new());
        assert_eq!(
            counts,
            TraceCounts {
                cuda_complete: 1,
                cuda_instant: 1,
                xid: 1,
                driver: 0,
                metadata: 4
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
        let (trace, counts) = build(&[], &[], &[op], Map::new());
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
}
