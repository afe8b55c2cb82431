//! The integration tests: one test crate, built once, whose modules are the files beside this
//! one (`tests/cli.rs` is `cli::`, so `cargo test --test integration cli::` runs that file).
//! The shared helpers (starting the agent, test peers, reading the lake) live in `support`.
//!
//! Every test of every file runs in this one process, concurrently: tests that need the machine
//! or the kernel log to themselves take `support::exclusive()`, the others that start an agent,
//! load BPF programs or write the kernel log take `support::shared()` (see `support::serial`).
//! Cargo's test auto-discovery is off (`autotests = false`): a file under `tests/` must be
//! declared here to run, which `layout::every_test_file_is_declared_in_main` checks.

mod support;

mod backpressure;
mod call_gpus;
mod cli;
mod config_hostile;
mod container;
mod cuda_capture;
mod cuda_stats;
mod cuda_stats_peers;
mod cuda_threads;
mod deploy;
mod doc_facts;
mod doctor;
mod driver_hooks;
mod export_trace;
mod flight_recorder;
mod health_metrics;
mod hostile_output;
mod jsonl;
mod kafka;
mod kernel_function_repeats;
mod kernel_names;
mod kmsg_cursor;
mod kubernetes;
mod kustomize;
mod lake_binary;
mod lake_compact;
mod lake_limits;
mod layout;
mod library_discovery;
mod lookup_memo;
mod makefile;
mod memory_calls;
mod memory_held;
mod metrics;
mod metrics_limits;
mod object_store;
mod operator_kit;
mod otlp;
mod outage;
mod outage_load;
mod overhead_budget;
mod preemption;
mod probe_sites;
mod query;
mod reload;
mod report;
mod run_modes;
mod secrets;
mod shutdown;
mod sink_stall;
mod state_dir;
mod top;
mod views_lake;
mod wire_docs;
mod xid_durability;
mod xid_intelligence;
mod xid_kmsg;
mod xid_suspects;
mod xid_tracepoint;
