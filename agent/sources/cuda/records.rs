//! This source's ring records (and the BPF map entries it reads) as plain old data, their
//! layouts checked against `bpf/include/gpuship_events.h` at compile time
//! ([`crate::decode::plain_record`]).

use crate::bpf::cuda::types::{
    cuda_event, cuda_named_event, cuda_recorder_slot, cuda_stats_key, cuda_stats_value,
    sent_answer_key,
};
use crate::decode::plain_record;

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
