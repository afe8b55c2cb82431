//! The generated BPF skeletons (see `build.rs`), one module per `bpf/*.bpf.c` program.
//! Nothing else lives here: the record layouts are read through `types` in each module.

#![allow(
    clippy::all,
    missing_docs,
    unsafe_op_in_unsafe_fn,
    non_camel_case_types
)]

pub mod xid {
    include!(concat!(env!("OUT_DIR"), "/xid.skel.rs"));
}

pub mod cuda {
    include!(concat!(env!("OUT_DIR"), "/cuda.skel.rs"));
}

pub mod driver {
    include!(concat!(env!("OUT_DIR"), "/driver.skel.rs"));
}
