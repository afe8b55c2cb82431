//! This source's ring records (and the BPF map entries it reads) as plain old data, their
//! layouts checked against `bpf/include/gpuship_events.h` at compile time
//! ([`crate::decode::plain_record`]).

use crate::bpf::driver::types::driver_event;
use crate::decode::plain_record;

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
