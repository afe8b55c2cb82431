//! CUDA driver API calls from uprobes on libcuda.so.1 (`bpf/cuda.bpf.c`).
//!
//! - [`catalog`]: the functions known by name and where their arguments are.
//! - [`library`]: finding the library and its exported functions; [`discovery`]: the
//!   libraries processes map, wherever their containers put them.
//! - [`plan`]: which symbols get probes, with which cookie.
//! - [`probes`]: loading the program and attaching the planned probes ([`attach`]).
//! - [`decode`]: ring records to rows; [`batcher`]: rows to batches.
//! - [`stats`]: `stats` mode's per-interval statistics taken out of the kernel's table as
//!   `cuda_stats` rows.
//! - [`source`]: the source as the consumer runs it.
//! - [`results`]: CUresult names.
//! - [`kernels`]: which kernel each handle is, for naming launch rows.
//! - [`history`]: each process's last launches and synchronisations, for an XID's suspects.
//! - [`budget`]: the overhead budget: hot functions probed part of the time in processes
//!   whose probes would cost them more than it.

pub mod attach;
pub mod batcher;
pub mod budget;
pub mod catalog;
pub mod config;
pub mod decode;
pub mod devices;
pub mod discovery;
pub mod doctor;
pub mod history;
pub mod kernels;
pub mod library;
pub mod memory;
pub mod plan;
pub mod probe_sites;
pub mod probes;
pub mod recorder;
mod records;
pub mod roles;
pub mod source;
pub mod stats;

pub use source::CudaSource;

/// Whether process `pid` still exists under `proc_dir` (`/proc` on a host): how the per-process
/// tables (names, history, devices, memory, answers sent) tell exited processes.
pub fn process_exists(proc_dir: &std::path::Path, pid: impl std::fmt::Display) -> bool {
    proc_dir.join(pid.to_string()).exists()
}
