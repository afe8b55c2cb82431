//! gpuship: makes NVIDIA GPU failures (XID errors) and CUDA driver activity visible.
//!
//! A tour of the crate, in the order data flows:
//! - [`sources`]: capture. BPF programs on the XID tracepoint and libcuda uprobes
//!   ([`bpf`] holds their generated skeletons), and the kernel-log reader.
//! - [`decode`]: ring-buffer records to typed rows, rejecting malformed ones.
//! - [`enrich`]: host identity, clocks, and GPU identity by PCI bus id.
//! - [`batcher`]: rows into Arrow record batches (schemas live in the `gpuship-sinks` crate).
//! - [`fanout`]: batches to every sink's bounded queue.
//! - [`accounting`]: counters that prove every event was delivered or counted as lost;
//!   [`metrics`] serves them to Prometheus.
//! - [`live`]: per-function and per-process totals and the latest XIDs, served on `/live`;
//!   [`top`] is the terminal view that reads them.
//! - [`run`]: wires it all together for `gpuship run`; [`doctor`] checks what can run here;
//!   [`config`] and [`cli`] are the edges; [`state_dir`] is the agent's state directory and
//!   its lock; [`escape`] makes outside text safe to print on a terminal.
//!
//! Reading the lake back (`gpuship report`, `export-trace`, `query`) is the `gpuship-lake`
//! crate, which this one only calls.

pub mod accounting;
pub mod batcher;
pub mod bpf;
pub mod capture;
pub mod cli;
pub mod config;
pub mod consumer;
pub mod decode;
pub mod doctor;
pub mod enrich;
pub mod escape;
pub mod fanout;
pub mod live;
pub mod logging;
pub mod metrics;
pub mod run;
pub mod sources;
pub mod state_dir;
pub mod summary;
pub mod top;
pub mod xid;
