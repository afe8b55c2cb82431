//! CUDA ring records to rows: the checked record, then the row with its function's name and
//! the arguments the probe captured.

use gpuship_sinks::schema::{CudaRow, LaunchDims};

use super::plan::FunctionTable;
use super::results::result_name;
use crate::bpf::cuda::types::{
    cuda_event, gpuship_arg_valid, gpuship_cuda_result, gpuship_record_kind,
};
use crate::decode::{read_record, DecodeError};
use crate::enrich::Clocks;

/// `cuda_event.result` of an entry-only record.
pub(crate) const NOT_CAPTURED: u32 = gpuship_cuda_result::GPUSHIP_RESULT_NOT_CAPTURED.0;

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
}

impl Decoder {
    /// A decoder using these clock offsets and function names.
    pub fn new(clocks: Clocks, functions: FunctionTable) -> Self {
        Self { clocks, functions }
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
        })
    }
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
