//! The ring records as plain old data ([`bytemuck::Pod`]), so that records are read from and
//! written to bytes without `unsafe` at the use sites.
//!
//! The record structs are generated (libbpf-cargo skeletons), so `Pod` cannot be derived on
//! them; it is implemented here, and what the derive would check is checked at compile time:
//! every field starts where the previous one ends (no padding the compiler inserted, whose
//! bytes would be uninitialized) and the struct ends with its last field. The field list
//! is the layout in `bpf/include/gpuship_events.h`; a change there that is not made here
//! fails the build.

use crate::bpf::cuda::types::{
    cuda_event, cuda_named_event, cuda_recorder_slot, cuda_stats_key, cuda_stats_value,
    sent_answer_key,
};
use crate::bpf::driver::types::driver_event;
use crate::bpf::xid::types::xid_event;

/// Implements `Zeroable` and `Pod` for a `#[repr(C)]` record after checking at compile time
/// that its fields, in order, leave no gap.
macro_rules! plain_record {
    ($record:ty { $($field:ident: $ty:ty),+ $(,)? }) => {
        const _: () = {
            let mut end = 0;
            $(
                assert!(
                    std::mem::offset_of!($record, $field) == end,
                    concat!(stringify!($record), ".", stringify!($field), " follows padding")
                );
                end += std::mem::size_of::<$ty>();
            )+
            assert!(
                std::mem::size_of::<$record>() == end,
                concat!(stringify!($record), " ends with padding")
            );
        };
        // SAFETY: a #[repr(C)] struct of integers and integer arrays (every bit pattern is a
        // valid value, and all are `Pod`), `Copy`, with no padding bytes (checked above).
        unsafe impl bytemuck::Zeroable for $record {}
        // SAFETY: as above.
        unsafe impl bytemuck::Pod for $record {}
    };
}

plain_record!(cuda_event {
    record_kind: u32,
    function_id: u32,
    start_boot_ns: u64,
    duration_ns: u64,
    pid: u32,
    tid: u32,
    result: u32,
    valid: u32,
    bytes: u64,
    device_ptr: u64,
    stream: u64,
    grid: [u32; 3],
    block: [u32; 3],
    shared_mem_bytes: u32,
    _pad: u32,
    comm: [i8; 16],
    handle: u64,
    parent_handle: u64,
});

plain_record!(cuda_named_event {
    call: cuda_event,
    name_ptr: u64,
    name_len: u32,
    name_flags: u32,
    name: [i8; 4096],
});

plain_record!(cuda_stats_key {
    tgid: u32,
    function_id: u32,
    result: u32,
    generation: u32,
});

plain_record!(sent_answer_key {
    tgid: u32,
    function_id: u32,
    handle: u64,
    answer: u64,
    exec_id: u64,
});

plain_record!(cuda_stats_value {
    calls: u64,
    duration_sum_ns: u64,
    duration_min_ns: u64,
    duration_max_ns: u64,
    bytes_sum: u64,
    comm: [i8; 16],
    buckets: [u32; 128],
});

plain_record!(cuda_recorder_slot {
    seq_begin: u64,
    event: cuda_event,
    seq_end: u64,
});

plain_record!(xid_event {
    record_kind: u32,
    error_code: u32,
    boot_time_ns: u64,
    pid: u32,
    tid: u32,
    dev_len: u16,
    msg_len: u16,
    flags: u32,
    comm: [i8; 16],
    dev: [i8; 32],
    msg: [i8; 512],
});

plain_record!(driver_event {
    record_kind: u32,
    hook: u32,
    start_boot_ns: u64,
    duration_ns: u64,
    pid: u32,
    tid: u32,
    ret: i64,
    fd: u32,
    request: u32,
    major: u32,
    minor: u32,
    comm: [i8; 16],
});
