//! This source's ring records (and the BPF map entries it reads) as plain old data, their
//! layouts checked against `bpf/include/gpuship_events.h` at compile time
//! ([`crate::decode::plain_record`]).

use crate::bpf::xid::types::xid_event;
use crate::decode::plain_record;

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
