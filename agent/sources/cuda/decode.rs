//! CUDA ring records to rows: the checked record, then the row with its function's name and
//! the arguments the probe captured.

use gpuship_sinks::schema::{CallObjects, CudaRow, LaunchDims};

use super::plan::FunctionTable;
use crate::bpf::cuda::types::{
    cuda_event, cuda_named_event, gpuship_arg_valid, gpuship_cuda_result, gpuship_name_flag,
    gpuship_record_kind,
};
use crate::decode::{read_record, DecodeError};
use crate::enrich::Clocks;
use gpuship_model::cuda_results::result_name;

/// `cuda_event.result` of an entry-only record.
pub(crate) const NOT_CAPTURED: u32 = gpuship_cuda_result::GPUSHIP_RESULT_NOT_CAPTURED.0;

/// A checked CUDA record: the call of a plain record or of a named one (see [`record_name`]).
#[inline]
pub fn cuda_event(raw: &[u8]) -> Result<cuda_event, DecodeError> {
    let event: cuda_event = read_record(raw, "cuda")?;
    let expected = gpuship_record_kind::GPUSHIP_RECORD_CUDA.0;
    if event.record_kind != expected
        && event.record_kind != gpuship_record_kind::GPUSHIP_RECORD_CUDA_NAMED.0
    {
        return Err(DecodeError::WrongKind {
            found: event.record_kind,
            expected,
            kind: "cuda",
        });
    }
    Ok(event)
}

/// The name a named record carries (a kernel's, from `cuLibraryGetKernel` or
/// `cuModuleGetFunction`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordName {
    /// The bytes the probe read, without the NUL.
    pub bytes: Vec<u8>,
    /// Where the name is in the process's memory.
    pub address: u64,
    /// The probe's copy may be cut short (it filled the record's buffer).
    pub maybe_truncated: bool,
    /// The probe could not read the name.
    pub unreadable: bool,
}

/// The name of a named record, None for a plain one; an error when a named record is short
/// or its length field overruns its buffer.
pub fn record_name(raw: &[u8], event: &cuda_event) -> Result<Option<RecordName>, DecodeError> {
    if event.record_kind != gpuship_record_kind::GPUSHIP_RECORD_CUDA_NAMED.0 {
        return Ok(None);
    }
    let named: cuda_named_event = read_record(raw, "cuda named")?;
    let name: &[u8] = bytemuck::cast_slice(&named.name);
    let len = named.name_len as usize;
    if len >= name.len() {
        return Err(DecodeError::FieldOverrun {
            field: "name_len",
            len,
            capacity: name.len() - 1,
        });
    }
    let flag = |flag: gpuship_name_flag| named.name_flags & flag.0 != 0;
    Ok(Some(RecordName {
        bytes: name[..len].to_vec(),
        address: named.name_ptr,
        maybe_truncated: flag(gpuship_name_flag::GPUSHIP_NAME_TRUNCATED),
        unreadable: flag(gpuship_name_flag::GPUSHIP_NAME_UNREADABLE),
    }))
}

/// Turns checked records into rows.
#[derive(Debug, Clone)]
pub struct Decoder {
    clocks: Clocks,
    functions: FunctionTable,
}

impl Decoder {
    /// A decoder using these clock offsets and function names.
    pub fn new(clocks: Clocks, functions: FunctionTable) -> Self {
        Self { clocks, functions }
    }

    /// Names function ids with `functions` from now on (a library found later brought more).
    pub fn set_functions(&mut self, functions: FunctionTable) {
        self.functions = functions;
    }

    /// The name of function `id`.
    pub fn function_name(&self, id: u32) -> Option<&str> {
        self.functions.name(id)
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
            launch: launch_dims(event),
            workload: None,
            objects: CallObjects {
                handle: valid(gpuship_arg_valid::GPUSHIP_ARG_HANDLE).then_some(event.handle),
                parent_handle: valid(gpuship_arg_valid::GPUSHIP_ARG_PARENT_HANDLE)
                    .then_some(event.parent_handle),
                kernel_name: None,
                kernel_name_demangled: None,
                gpu: None,
                memory: None,
            },
        })
    }
}

/// The device UUID a call returned (`cuDeviceGetUuid*`: `GPUSHIP_ARG_UUID`), its 16 bytes in
/// the launch area in memory order.
pub fn returned_uuid(event: &cuda_event) -> Option<[u8; 16]> {
    if event.valid & gpuship_arg_valid::GPUSHIP_ARG_UUID.0 == 0 {
        return None;
    }
    let words = [event.grid[0], event.grid[1], event.grid[2], event.block[0]];
    let mut bytes = [0u8; 16];
    for (chunk, word) in bytes.chunks_exact_mut(4).zip(words) {
        chunk.copy_from_slice(&word.to_ne_bytes());
    }
    Some(bytes)
}

/// A launch's dimensions: all of them when the stack-passed arguments were read
/// (`GPUSHIP_ARG_LAUNCH`), grid and block x/y when only the registers were
/// (`GPUSHIP_ARG_GRID`: a flight-recorder launch), none for other functions.
fn launch_dims(event: &cuda_event) -> Option<LaunchDims> {
    let valid = |flag: gpuship_arg_valid| event.valid & flag.0 != 0;
    let full = valid(gpuship_arg_valid::GPUSHIP_ARG_LAUNCH);
    if !full && !valid(gpuship_arg_valid::GPUSHIP_ARG_GRID) {
        return None;
    }
    Some(LaunchDims {
        grid: event.grid,
        block: event.block,
        shared_mem_bytes: event.shared_mem_bytes,
        registers_only: !full,
    })
}

#[cfg(test)]
mod tests;
