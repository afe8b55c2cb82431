//! The start phase of `gpuship run`: everything that must work before anything is captured.
//! Sinks that cannot start, missing privileges, a locked state directory or a metrics port in
//! use are errors here. Then the runtime, the sinks with their queues and spools, the
//! accounting documents and the metrics server start. What starts here lives for the whole
//! run; a configuration reload changes only the sinks (and the capture).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, Context};
use gpuship_sinks::schema::HostIdentity;

use super::ledger::Ledger;
use super::privileges;
use super::progress::Signals;
use super::sink_set::SinkSet;
use super::sinks::{self, sink_names};
use crate::accounting::Accounting;
use crate::config::Config;
use crate::consumer;
use crate::enrich::{host_identity, machine_id, Clocks, GpuDirectory};
use crate::live::LiveTap;
use crate::metrics::otlp::MetricsExport;
use crate::metrics::{self, Health};
use crate::state_dir::AgentLocks;

/// What the start phase set up; the later phases use it.
pub(super) struct Started {
    /// Held until the run returns; the kernel releases them however the process ends. A
    /// reload that adds a Parquet root adds its lock.
    pub locks: AgentLocks,
    /// Host identity for rows.
    pub identity: HostIdentity,
    /// Clock offsets.
    pub clocks: Clocks,
    /// GPUs by bus id.
    pub gpus: Arc<GpuDirectory>,
    /// The async runtime the sinks, the metrics server and the ledger run on.
    pub runtime: tokio::runtime::Runtime,
    /// SIGTERM, SIGINT and SIGHUP, waited on by the wait phase.
    pub signals: Option<Signals>,
    /// Counters.
    pub accounting: Arc<Accounting>,
    /// Every sink, and the fan-out to them.
    pub sinks: SinkSet,
    /// The accounting documents kept beside the data, when a sink has a place for them.
    pub ledger: Option<Ledger>,
    /// What `/health` answers.
    pub health: Arc<Health>,
    /// The live view (`/live`).
    pub live: Arc<LiveTap>,
    /// The OTLP metrics exporter, when `[metrics.otlp]` is set.
    pub metrics_export: Option<MetricsExport>,
    /// Kernel-log records of this boot whose XIDs a previous run journaled (read before the
    /// sinks start delivering, and so removing, them).
    pub journaled_kmsg: BTreeSet<u64>,
}

/// Checks what must hold, then starts the runtime, the sinks, the ledger and the metrics.
pub(super) fn start(config: &Config) -> anyhow::Result<Started> {
    // A sink that cannot start is an error now, before anything is captured.
    for (name, entry) in sink_names(&config.sinks).iter().zip(&config.sinks) {
        sinks::check_start(&entry.sink)
            .map_err(|reason| anyhow!("sink {name} cannot start: {reason}"))?;
    }
    privileges::check(&config.sources.bpf_sources_on())?;
    let locks = crate::state_dir::lock(config)?;
    tracing::debug!(locked = ?locks.locked, "state directory and parquet roots locked");
    let identity = host_identity(config.agent.host_name.as_deref());
    let clocks = Clocks::measure();
    let gpus = Arc::new(GpuDirectory::load(&config.enrich.nvidia_proc_dir));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("gpuship-rt")
        // The sinks run here and must keep up with the consumer (see consumer::priority).
        .on_thread_start(consumer::priority::raise_sink_thread)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let signals = {
        let _runtime = runtime.enter();
        Signals::install()
    };
    // Before any sink starts: a port in use is a start error, not a silent run without probes.
    let metrics_listener = metrics::bind(&config.metrics, &runtime)?;
    let journaled_kmsg = journaled_kmsg_records(config, &identity.boot_id);
    let accounting = Arc::new(Accounting::default());
    let sinks = SinkSet::start(config, &identity, &runtime, &accounting);
    let ledger = Ledger::for_sinks(
        &config.sinks,
        &identity.host,
        chrono::Utc::now(),
        runtime.handle(),
    );
    if let Some(ledger) = &ledger {
        tracing::info!(documents = ?ledger.locations(), "accounting documents kept beside the data");
        let period = Duration::from_secs(config.agent.progress_interval_secs.clamp(1, 60));
        runtime.spawn(ledger.clone().keep_written(accounting.clone(), period));
    }
    let health = Arc::new(Health::default());
    let live = Arc::new(LiveTap::new());
    let metrics_export = match &config.metrics.otlp {
        Some(otlp) => {
            let host_id = machine_id();
            // The gRPC channel is made inside the runtime it will run on.
            let _runtime = runtime.enter();
            let export = MetricsExport::new(otlp, &identity, host_id.as_deref(), live.clone())?;
            runtime.spawn(export.clone().run());
            Some(export)
        }
        None => None,
    };
    if let Some(listener) = metrics_listener {
        let served = metrics::Served {
            accounting: accounting.clone(),
            health: health.clone(),
            live: live.clone(),
            otlp_exports: metrics_export.as_ref().map(|e| e.counters.clone()),
        };
        let limits = metrics::Limits::new(config.metrics.max_connections);
        runtime.spawn(metrics::serve(listener, served, limits));
    }
    Ok(Started {
        locks,
        identity,
        clocks,
        gpus,
        runtime,
        signals: Some(signals),
        accounting,
        sinks,
        ledger,
        health,
        live,
        metrics_export,
        journaled_kmsg,
    })
}

/// Kernel-log sequence numbers of this boot whose XIDs a previous run journaled in any sink.
fn journaled_kmsg_records(config: &Config, boot_id: &str) -> BTreeSet<u64> {
    use arrow_array::cast::AsArray;
    use arrow_array::types::UInt64Type;
    use arrow_array::Array;
    let mut seqs = BTreeSet::new();
    for name in sink_names(&config.sinks) {
        let dir = config.agent.state_dir.join("spool").join(&name);
        for batch in gpuship_sinks::journaled_xids(&dir) {
            let records = &batch.records;
            let (Some(boots), Some(kmsg)) = (
                records.column_by_name("boot_id"),
                records.column_by_name("kmsg_seq"),
            ) else {
                continue;
            };
            let (Some(boots), Some(kmsg)) = (
                boots.as_string_opt::<i32>(),
                kmsg.as_primitive_opt::<UInt64Type>(),
            ) else {
                continue;
            };
            for row in 0..records.num_rows() {
                if !kmsg.is_null(row) && boots.value(row) == boot_id {
                    seqs.insert(kmsg.value(row));
                }
            }
        }
    }
    seqs
}
