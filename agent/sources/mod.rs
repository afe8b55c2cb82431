//! Capture: everything that produces events, one folder per source behind one interface
//! ([`source`]), registered in [`REGISTRY`].
//!
//! - [`xid_tracepoint`]: the BPF program on `nvidia:nvidia_dev_xid`.
//! - [`cuda`]: BPF uprobes on libcuda's driver API.
//! - [`driver`]: NVIDIA driver ioctls and functions (syscall tracepoints, fentry/fexit).
//! - [`kmsg`]: `NVRM: Xid` lines from the kernel log (a thread, not a ring).
//! - [`functions`]: function names by id (probe cookies to names).
//! - [`tracefs`]: finding (or mounting) the tracing filesystem the first one needs.
//!
//! Each source folder owns its loader, record decoder, batcher and counters, and hands its
//! output on through [`output`] only: no source knows the fan-out, the XID stage or the live
//! view. Adding a source is a new folder and one line in [`REGISTRY`] (see
//! docs/ARCHITECTURE.md, "How to add a source").

pub mod config;
pub mod cuda;
pub mod driver;
pub mod functions;
pub mod kmsg;
pub mod output;
pub mod source;
pub mod stats_histogram;
pub mod tracefs;
pub mod xid_config;
pub mod xid_tracepoint;

use crate::diagnosis::{Check, HostFacts};
pub use output::Outputs;
pub use source::{
    trace_process, Loaded, ProcessFilter, RingMaps, RingSource, RunningRing, RunningThread,
    SourceSetup, SourceStatus, Started, ThreadSource,
};

/// One registered source.
#[derive(Clone, Copy)]
pub enum Registered {
    /// Polled by the consumer thread.
    Ring(&'static dyn RingSource),
    /// Runs on its own thread.
    Thread(&'static dyn ThreadSource),
}

/// Every source, in the order they start and their statuses are reported.
pub static REGISTRY: &[Registered] = &[
    Registered::Ring(&xid_tracepoint::XidTracepointSource),
    Registered::Ring(&cuda::CudaSource),
    Registered::Ring(&driver::DriverSource),
    Registered::Thread(&kmsg::KmsgSource),
];

/// The registered ring sources, in order.
pub fn ring_sources() -> impl Iterator<Item = &'static dyn RingSource> {
    REGISTRY.iter().filter_map(|entry| match entry {
        Registered::Ring(source) => Some(*source),
        Registered::Thread(_) => None,
    })
}

/// Whether the registered source `name` reports XIDs.
pub fn reports_xids(name: &str) -> bool {
    REGISTRY.iter().any(|entry| match entry {
        Registered::Ring(source) => source.name() == name && source.reports_xids(),
        Registered::Thread(source) => source.name() == name && source.reports_xids(),
    })
}

/// Every registered source's doctor checks, in registry order.
pub fn doctor_checks(sources: &config::SourcesConfig, host: &HostFacts) -> Vec<Check> {
    REGISTRY
        .iter()
        .flat_map(|entry| match entry {
            Registered::Ring(source) => source.doctor(sources, host),
            Registered::Thread(source) => source.doctor(sources, host),
        })
        .collect()
}

/// The registered thread sources, in order.
pub fn thread_sources() -> impl Iterator<Item = &'static dyn ThreadSource> {
    REGISTRY.iter().filter_map(|entry| match entry {
        Registered::Thread(source) => Some(*source),
        Registered::Ring(_) => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Statuses and `gpuship run`'s summary list the sources in this order.
    #[test]
    fn the_registry_lists_every_source_once_in_start_order() {
        let rings: Vec<_> = ring_sources().map(|s| s.name()).collect();
        let threads: Vec<_> = thread_sources().map(|s| s.name()).collect();
        assert_eq!(rings, ["xid_tracepoint", "cuda", "driver"]);
        assert_eq!(threads, ["kmsg"]);
        assert_eq!(REGISTRY.len(), rings.len() + threads.len());
    }
}

#[cfg(test)]
mod decode_fuzz_tests;
#[cfg(test)]
mod decode_tests;
