//! `driver` rows: the NVIDIA device-file operations a process made, for the trace.

use arrow_array::types::{Int32Type, Int64Type, UInt32Type, UInt64Type};
use arrow_array::RecordBatch;

use super::{text, value, Columns};

/// One driver operation (`driver` table). Each field is the column of the same name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriverOp {
    pub time_ns: i64,
    pub host: String,
    pub pid: i32,
    pub tid: i32,
    pub comm: String,
    pub hook: String,
    pub device: Option<String>,
    pub request: Option<u32>,
    pub request_name: Option<String>,
    pub duration_ns: u64,
    pub result: Option<i64>,
}

/// Every driver operation in `batches`.
pub fn driver_ops(batches: &[RecordBatch]) -> Vec<DriverOp> {
    let mut ops = Vec::new();
    for batch in batches {
        let c = Columns(batch);
        for (i, time_ns) in c.times().into_iter().enumerate() {
            let (Some(time_ns), Some(pid)) = (time_ns, value(c.primitive::<Int32Type>("pid"), i))
            else {
                continue;
            };
            ops.push(DriverOp {
                time_ns,
                host: text(c.strings("host"), i).unwrap_or_default(),
                pid,
                tid: value(c.primitive::<Int32Type>("tid"), i).unwrap_or(pid),
                comm: text(c.strings("comm"), i).unwrap_or_default(),
                hook: text(c.strings("hook"), i).unwrap_or_else(|| "driver".into()),
                device: text(c.strings("device"), i),
                request: value(c.primitive::<UInt32Type>("request"), i),
                request_name: text(c.strings("request_name"), i),
                duration_ns: value(c.primitive::<UInt64Type>("duration_ns"), i).unwrap_or(0),
                result: value(c.primitive::<Int64Type>("result"), i),
            });
        }
    }
    ops.sort_by_key(|o| (o.time_ns, o.pid, o.tid));
    ops
}
