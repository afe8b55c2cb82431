//! CUDA driver API calls from uprobes on libcuda.so.1 (`bpf/cuda.bpf.c`).
//!
//! - [`catalog`]: the functions known by name and where their arguments are.
//! - [`library`]: finding the library and its exported functions.
//! - [`plan`]: which symbols get probes, with which cookie.
//! - [`probes`]: loading the program and attaching the planned probes.
//! - [`results`]: CUresult names.

pub mod attach;
pub mod catalog;
pub mod library;
pub mod plan;
pub mod probes;
pub mod results;
