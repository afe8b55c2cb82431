//! Ring-buffer records to typed rows.
//!
//! Records come from the kernel, so every one is checked (length, kind tag, function id)
//! before use; a bad record is an error the consumer counts and skips, never a panic.
//! Layouts are the skeleton types generated from `bpf/include/gpuship_events.h`.

use std::borrow::Cow;
use std::sync::Arc;

use gpuship_sinks::schema::{CudaRow, DriverRow, LaunchDims, XidRecord, XidSource};

use crate::bpf::cuda::types::{
    cuda_event, gpuship_arg_valid, gpuship_cuda_result, gpuship_record_kind,
};
use crate::bpf::driver::types::{
    driver_event, gpuship_driver_hook, gpuship_record_kind as DriverRecordKind,
};
use crate::bpf::xid::types::{gpuship_xid_flag, xid_event};
use crate::enrich::{Clocks, GpuDirectory};
use crate::sources::cuda::plan::FunctionTable;
use crate::sources::cuda::results::result_name;
use crate::sources::driver::devices::DeviceNames;
use crate::sources::driver::requests;

/// Why a record was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Shorter than the struct it should hold.
    #[error("record of {len} bytes is shorter than the {expected}-byte {kind} event")]
    TooShort {
        /// Record length.
        len: usize,
        /// Struct size.
        expected: usize,
        /// Which event.
        kind: &'static str,
    },
    /// The leading kind tag is not the expected one (wrong ring or ABI version).
    #[error("record kind tag {found:#x} is not {expected:#x} ({kind})")]
    WrongKind {
        /// Tag found.
        found: u32,
        /// Tag expected.
        expected: u32,
        /// Which event.
        kind: &'static str,
    },
    /// A CUDA event names a function id no probe was given.
    #[error("CUDA event for unknown function id {0}")]
    UnknownFunction(u32),
    #[error("driver event for unknown hook {0}")]
    UnknownHook(u32),
}

/// Copies a record into `T` after checking its length. The copy is unaligned-safe.
fn read_record<T: Copy>(raw: &[u8], kind: &'static str) -> Result<T, DecodeError> {
    let expected = std::mem::size_of::<T>();
    if raw.len() < expected {
        return Err(DecodeError::TooShort {
            len: raw.len(),
            expected,
            kind,
        });
    }
    // SAFETY: `raw` holds at least size_of::<T>() bytes, `read_unaligned` has no alignment
    // requirement, and T is one of the plain-data skeleton structs (integers and byte arrays)
    // for which every bit pattern is valid.
    Ok(unsafe { std::ptr::read_unaligned(raw.as_ptr().cast::<T>()) })
}

/// Text of a NUL-padded C char array (invalid UTF-8 is replaced, never rejected).
pub fn c_chars(chars: &[i8]) -> Cow<'_, str> {
    // SAFETY: i8 and u8 have the same size and alignment; this reinterprets the same bytes.
    let bytes = unsafe { std::slice::from_raw_parts(chars.as_ptr().cast::<u8>(), chars.len()) };
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    // Names are almost always valid UTF-8: check that first, without the lossy path's chunking.
    match std::str::from_utf8(&bytes[..end]) {
        Ok(text) => Cow::Borrowed(text),
        Err(_) => String::from_utf8_lossy(&bytes[..end]),
    }
}

/// A driver record as a row: the hook's name, the device's name and the decoded request.
/// `slot_functions` names what each fentry slot times; `devices` names device numbers.
pub fn driver_row(
    raw: &[u8],
    clocks: &Clocks,
    slot_functions: &[Option<String>],
    devices: &mut DeviceNames,
) -> Result<DriverRow, DecodeError> {
    let event: driver_event = read_record(raw, "driver")?;
    let expected = DriverRecordKind::GPUSHIP_RECORD_DRIVER.0;
    if event.record_kind != expected {
        return Err(DecodeError::WrongKind {
            found: event.record_kind,
            expected,
            kind: "driver",
        });
    }
    let comm = c_chars(&event.comm).into_owned();
    let time_ns = clocks.boot_to_unix_ns(event.start_boot_ns);
    let (pid, tid) = (event.pid as i32, event.tid as i32);
    if event.hook == gpuship_driver_hook::GPUSHIP_DRIVER_HOOK_IOCTL.0 {
        let device = devices.name(event.major, event.minor).map(str::to_string);
        let request = requests::decode(event.request, device.as_deref());
        return Ok(DriverRow {
            time_ns,
            pid,
            tid,
            comm,
            hook: "ioctl".into(),
            device,
            major: Some(event.major),
            minor: Some(event.minor),
            fd: Some(event.fd as i32),
            request: Some(event.request),
            request_dir: Some(request.dir),
            request_type: Some(request.kind),
            request_nr: Some(request.nr),
            request_size: Some(request.size),
            request_name: request.name,
            duration_ns: event.duration_ns,
            result: Some(event.ret),
            workload: None,
        });
    }
    let slot = event
        .hook
        .checked_sub(gpuship_driver_hook::GPUSHIP_DRIVER_HOOK_SLOT_BASE.0)
        .ok_or(DecodeError::UnknownHook(event.hook))?;
    let function = slot_functions
        .get(slot as usize)
        .cloned()
        .flatten()
        .ok_or(DecodeError::UnknownHook(event.hook))?;
    Ok(DriverRow {
        time_ns,
        pid,
        tid,
        comm,
        hook: function,
        device: None,
        major: None,
        minor: None,
        fd: None,
        request: None,
        request_dir: None,
        request_type: None,
        request_nr: None,
        request_size: None,
        request_name: None,
        duration_ns: event.duration_ns,
        result: None,
        workload: None,
    })
}

/// `cuda_event.result` of an entry-only record.
const NOT_CAPTURED: u32 = gpuship_cuda_result::GPUSHIP_RESULT_NOT_CAPTURED.0;

/// A checked CUDA record.
#[inline]
pub fn cuda_event(raw: &[u8]) -> Result<cuda_event, DecodeError> {
    let event: cuda_event = read_record(raw, "cuda")?;
    let expected = gpuship_record_kind::GPUSHIP_RECORD_CUDA.0;
    if event.record_kind != expected {
        return Err(DecodeError::WrongKind {
            found: event.record_kind,
            expected,
            kind: "cuda",
        });
    }
    Ok(event)
}

/// Turns checked records into rows.
#[derive(Debug, Clone)]
pub struct Decoder {
    clocks: Clocks,
    functions: FunctionTable,
    gpus: Arc<GpuDirectory>,
}

impl Decoder {
    /// A decoder using these clock offsets, function names and GPUs.
    pub fn new(clocks: Clocks, functions: FunctionTable, gpus: Arc<GpuDirectory>) -> Self {
        Self {
            clocks,
            functions,
            gpus,
        }
    }

    /// The row for a CUDA event; `comm` is `c_chars(&event.comm)`.
    #[inline]
    pub fn cuda_row<'a>(
        &'a self,
        event: &cuda_event,
        comm: &'a str,
    ) -> Result<CudaRow<'a>, DecodeError> {
        let function = self
            .functions
            .name(event.function_id)
            .ok_or(DecodeError::UnknownFunction(event.function_id))?;
        let valid = |flag: gpuship_arg_valid| event.valid & flag.0 != 0;
        // An entry-only function's record: no CUresult was seen. It is not a failure (result 0,
        // so filters, summaries and incident links leave it alone); the name says so.
        let (result, result_name) = if event.result == NOT_CAPTURED {
            (0, "NOT_CAPTURED")
        } else {
            (event.result, result_name(event.result))
        };
        Ok(CudaRow {
            time_ns: self.clocks.boot_to_unix_ns(event.start_boot_ns),
            pid: event.pid as i32,
            tid: event.tid as i32,
            comm,
            function,
            duration_ns: event.duration_ns,
            result,
            result_name,
            bytes: valid(gpuship_arg_valid::GPUSHIP_ARG_BYTES).then_some(event.bytes),
            device_ptr: valid(gpuship_arg_valid::GPUSHIP_ARG_DEVICE_PTR)
                .then_some(event.device_ptr),
            stream: valid(gpuship_arg_valid::GPUSHIP_ARG_STREAM).then_some(event.stream),
            launch: valid(gpuship_arg_valid::GPUSHIP_ARG_LAUNCH).then_some(LaunchDims {
                grid: event.grid,
                block: event.block,
                shared_mem_bytes: event.shared_mem_bytes,
            }),
            workload: None,
        })
    }

    /// The row for an XID tracepoint record.
    pub fn xid_record(&self, raw: &[u8]) -> Result<XidRecord, DecodeError> {
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
        let gpu = self.gpus.lookup(&pci_bus_id);
        let message = c_chars(&event.msg[..msg_len]).trim_end().to_string();
        Ok(XidRecord {
            time_ns: self.clocks.boot_to_unix_ns(event.boot_time_ns),
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
}

/// Raw bytes of a skeleton struct, for tests and benchmarks that build records by hand.
pub fn record_bytes<T: Copy>(value: &T) -> Vec<u8> {
    // SAFETY: T is a plain-data skeleton struct; viewing its bytes is always valid.
    unsafe {
        std::slice::from_raw_parts((value as *const T).cast::<u8>(), std::mem::size_of::<T>())
    }
    .to_vec()
}

#[cfg(test)]
mod fuzz_tests;
#[cfg(test)]
mod tests;
