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
    if let Some(kernel) = &call.kernel {
        args.insert("kernel".into(), json!(kernel));
    }
    args
}

/// An XID's columns.
pub fn xid_args(xid: &Xid) -> Value {
    let suspects: Vec<Value> = xid
        .suspects
        .iter()
        .enumerate()
        .map(|(i, s)| {
            json!({
                "rank": i + 1, "kernel": s.kernel, "function": s.function,
                "completed": s.completed, "time_ns": s.time_ns, "tid": s.tid,
            })
        })
        .collect();
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
        "suspect_kernel": xid.suspect_kernel,
        "suspects": suspects,
        "suspects_sampled": xid.suspects_sampled,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::views::fixtures::{cuda_batch, cuda_row, xid_batch, xid_record};
    use crate::views::rows;
    use gpuship_sinks::schema::{CallObjects, KernelSuspect};

    #[test]
    fn a_launch_shows_its_kernel_and_an_xid_its_first_suspect() {
        let mut xid = xid_record(1_000, 31, "0000:3b:00.0", "error", "MMU Fault");
        xid.annotations.suspects = Some(vec![
            KernelSuspect {
                kernel_name_demangled: "wild_write(int*)".into(),
                ..KernelSuspect::default()
            },
            KernelSuspect::default(),
        ]);
        let xids = rows::xids(&[xid_batch(&[
            xid,
            xid_record(2_000, 79, "0000:3b:00.0", "fatal", "off the bus"),
        ])]);
        assert_eq!(xid_args(&xids[0])["suspect_kernel"], "wild_write(int*)");
        assert_eq!(xid_args(&xids[1])["suspect_kernel"], Value::Null);
        let launch = gpuship_sinks::schema::CudaRow {
            objects: CallObjects {
                handle: Some(0x6b00_0000),
                kernel_name: Some("_Z10wild_writePi"),
                kernel_name_demangled: Some("wild_write(int*)"),
                ..CallObjects::default()
            },
            ..cuda_row(500, "cuLaunchKernel", 0, 10)
        };
        let calls =
            rows::cuda_calls(&[cuda_batch(&[launch, cuda_row(600, "cuMemAlloc_v2", 0, 5)])]);
        assert_eq!(cuda_args(&calls[0])["kernel"], "wild_write(int*)");
        assert!(!cuda_args(&calls[1]).contains_key("kernel"));
    }
}
