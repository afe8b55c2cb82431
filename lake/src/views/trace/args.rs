//! The `args` and names of the trace's events, from the rows' columns: what a trace viewer shows
//! when an event is selected.

use serde_json::{json, Map, Value};

use crate::views::rows::{CudaCall, DriverOp, Xid};

/// `0x...`.
pub fn hex(value: u64) -> String {
    format!("{value:#x}")
}

/// A CUDA call's arguments, result and incident.
pub fn cuda_args(call: &CudaCall) -> Map<String, Value> {
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

/// An XID's columns.
pub fn xid_args(xid: &Xid) -> Value {
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

/// A driver operation's event name: the ioctl escape's name, else `hook 0x...`, else the hook.
pub fn driver_name(op: &DriverOp) -> String {
    match (&op.request_name, op.request) {
        (Some(name), _) => name.clone(),
        (None, Some(request)) => format!("{} {}", op.hook, hex(u64::from(request))),
        (None, None) => op.hook.clone(),
    }
}
