//! XID tracepoint records to rows: the GPU by its bus id, the message, and the tracepoint's
//! own print format.

use gpuship_sinks::schema::{XidRecord, XidSource};

use crate::bpf::xid::types::{gpuship_record_kind, gpuship_xid_flag, xid_event};
use crate::decode::{c_chars, read_record, DecodeError};
use crate::enrich::{Clocks, GpuDirectory};

/// The row for an XID tracepoint record, with its GPU looked up in `gpus`.
pub fn xid_record(
    raw: &[u8],
    clocks: &Clocks,
    gpus: &GpuDirectory,
) -> Result<XidRecord, DecodeError> {
    let event: xid_event = read_record(raw, "xid")?;
    let expected = gpuship_record_kind::GPUSHIP_RECORD_XID.0;
    if event.record_kind != expected {
        return Err(DecodeError::WrongKind {
            found: event.record_kind,
            expected,
            kind: "xid",
        });
    }
    let dev_len = usize::from(event.dev_len).min(event.dev.len());
    let msg_len = usize::from(event.msg_len).min(event.msg.len());
    let pci_bus_id = c_chars(&event.dev[..dev_len]).trim().to_lowercase();
    let gpu = gpus.lookup(&pci_bus_id);
    let message = c_chars(&event.msg[..msg_len]).trim_end().to_string();
    Ok(XidRecord {
        time_ns: clocks.boot_to_unix_ns(event.boot_time_ns),
        code: event.error_code,
        // The tracepoint's own print format.
        raw_tracepoint: Some(format!(
            "Xid (PCI:{pci_bus_id}): {}, {message}",
            event.error_code
        )),
        pci_bus_id,
        gpu,
        message,
        source: XidSource::Tracepoint,
        // The tracepoint fires in the driver's context, not the faulting process.
        pid: None,
        comm: None,
        reporter_pid: Some(event.pid as i32),
        reporter_comm: Some(c_chars(&event.comm).into_owned()),
        kmsg_seq: None,
        message_truncated: event.flags & gpuship_xid_flag::GPUSHIP_XID_MSG_TRUNCATED.0 != 0,
        ..XidRecord::new(XidSource::Tracepoint)
    })
}
