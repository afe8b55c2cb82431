//! Capture: everything that produces events.
//!
//! - [`xid_tracepoint`]: the BPF program on `nvidia:nvidia_dev_xid`.
//! - [`kmsg`]: `NVRM: Xid` lines from the kernel log.
//! - [`cuda`]: BPF uprobes on libcuda's driver API.
//! - [`tracefs`]: finding (or mounting) the tracing filesystem the first one needs.
//!
//! Sources only capture; decoding and batching happen downstream.

pub mod cuda;
pub mod driver;
pub mod kmsg;
pub mod tracefs;
pub mod xid_tracepoint;
