//! The generated BPF skeletons (see `build.rs`), one module per `bpf/*.bpf.c` program, named
//! after its file (`bpf/cuda.bpf.c` is `bpf::cuda`).
//! Nothing else lives here: the record layouts are read through `types` in each module.

#![allow(
    clippy::all,
    missing_docs,
    unsafe_op_in_unsafe_fn,
    non_camel_case_types
)]

include!(concat!(env!("OUT_DIR"), "/skeletons.rs"));
