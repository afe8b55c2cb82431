//! gpuship: makes NVIDIA GPU failures (XID errors) and CUDA driver activity visible.
//!
//! A tour of the crate, in the order data flows:
//! - [`sources`]: capture, one folder per source behind one trait (BPF programs on the XID
//!   tracepoint, libcuda uprobes and driver hooks, whose generated skeletons are in [`bpf`],
//!   and the kernel-log reader), each with its loader, decoder and batcher; [`consumer`]
//!   polls the ring sources' rings.
//! - [`decode`]: what the sources' record decoders share (checked copies, C strings).
//! - [`enrich`]: host identity, clocks, and GPU identity by PCI bus id.
//! - [`xid`]: the XID stage the XID sources report to; [`batcher`]: XIDs into batches.
//! - [`fanout`]: batches to every sink's bounded queue.
//! - [`accounting`]: counters that prove every event was delivered or counted as lost;
//!   [`metrics`] serves them to Prometheus.
//! - [`live`]: per-function and per-process totals and the latest XIDs, served on `/live`;
//!   `gpuship top` (the `gpuship-top` crate) is the terminal view that reads them.
//! - [`run`]: wires it all together for `gpuship run`; [`doctor`] checks what can run here,
//!   asking each source for its checks in the vocabulary of [`diagnosis`];
//!   [`config`] and [`cli`] are the edges; [`state_dir`] is the agent's state directory and
//!   its lock; [`escape`] makes outside text safe to print on a terminal.
//!
//! Reading the lake back (`gpuship report`, `export-trace`, `query`) is the `gpuship-lake`
//! crate and binary; [`lake_views`] hands those commands to it, so the agent links no query
//! engine.

pub mod accounting;
pub mod batcher;
pub mod bpf;
pub mod cli;
pub mod cli_docs;
pub mod config;
pub mod consumer;
pub mod decode;
pub mod diagnosis;
pub mod doctor;
pub mod enrich;
/// Terminal escaping lives in `gpuship-top` (which the daemon links) so that there is one copy.
pub use gpuship_top::escape;
pub mod fanout;
pub mod health;
pub mod heap;
pub mod lake_views;
pub mod live;
pub mod logging;
pub mod metrics;
pub mod run;
pub mod sources;
pub mod state_dir;
pub mod state_file;
pub mod summary;
pub mod table_problems;
pub mod xid;
