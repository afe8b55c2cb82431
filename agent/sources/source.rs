//! The capture-source interface: what every source implements so that the consumer and
//! `gpuship run` can start, poll and stop it without knowing which source it is.
//!
//! Two shapes, one per way of getting records:
//! - [`RingSource`]: a BPF program with one or more rings. The consumer thread loads every
//!   ring source ([`RingSource::load`]: attached, or skipped with a reason), polls all their
//!   rings, hands each record to the source that owns the ring ([`RunningRing::on_record`]),
//!   flushes on its timer and at stop ([`RunningRing::flush`]), detaches before the last drain.
//! - [`ThreadSource`]: a source that reads on a thread of its own (the kernel log): started
//!   after the rings are attached, joined at stop, finished once the XID stage has emitted.
//!
//! A source counts what it received and rejected through the ring table of
//! [`Accounting`](crate::accounting::Accounting) (the consumer does it for rings) and hands
//! its output on through [`Outputs`] only.

use std::collections::BTreeSet;
use std::mem::MaybeUninit;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use gpuship_sinks::schema::HostIdentity;
use libbpf_rs::{MapHandle, OpenObject};

use super::config::SourcesConfig;
use super::output::Outputs;
use crate::accounting::{Accounting, Ring};
use crate::batcher::BatchConfig;
use crate::decode::DecodeError;
use crate::diagnosis::{Check, HostFacts};
use crate::enrich::EnrichConfig;
use crate::enrich::{Clocks, GpuDirectory};
use crate::summary::RunSummary;

/// Whether a source (or one of its hooks) attached, and why not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceStatus {
    /// The source's name (`xid_tracepoint`, `cuda`, ...), or one of its hooks'
    /// (`driver_ioctl`, `driver_function`).
    pub source: &'static str,
    /// True when attached.
    pub attached: bool,
    /// Details or the reason it is not attached.
    pub detail: String,
}

impl SourceStatus {
    /// An attached source.
    pub fn attached(source: &'static str, detail: impl Into<String>) -> Self {
        Self {
            source,
            attached: true,
            detail: detail.into(),
        }
    }

    /// A source that does not run, and why.
    pub fn skipped(source: &'static str, reason: impl Into<String>) -> Self {
        Self {
            source,
            attached: false,
            detail: reason.into(),
        }
    }
}

/// Which processes the probes record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcessFilter {
    /// Every process that maps the library.
    All,
    /// Only processes whose tgid is put in the `traced_tgids` map, and their descendants.
    Selected,
}

/// Adds a process to a [`ProcessFilter::Selected`] trace: `traced` is the map a running
/// source hands out ([`RunningRing::traced_processes`]), keyed by tgid (`gpuship_events.h`).
pub fn trace_process(traced: &MapHandle, pid: u32) -> anyhow::Result<()> {
    use anyhow::Context;
    use libbpf_rs::MapCore;
    traced
        .update(&pid.to_ne_bytes(), &[1u8], libbpf_rs::MapFlags::ANY)
        .with_context(|| format!("adding pid {pid} to the traced processes"))
}

/// What every source may need to start: its configuration, the host's identity, clocks and
/// GPUs, the counters, the stop flag and where its output goes.
#[derive(Clone)]
pub struct SourceSetup {
    /// `[sources]`.
    pub sources: SourcesConfig,
    /// `[batch]`.
    pub batch: BatchConfig,
    /// `[enrich]` (where processes' cgroups and pod folders are).
    pub enrich: EnrichConfig,
    /// Which processes CUDA probes record.
    pub filter: ProcessFilter,
    /// Host identity for rows.
    pub identity: HostIdentity,
    /// Clock offsets.
    pub clocks: Clocks,
    /// GPUs by bus id.
    pub gpus: Arc<GpuDirectory>,
    /// Counters.
    pub accounting: Arc<Accounting>,
    /// Set to stop; each source drains what it already holds first.
    pub stop: Arc<AtomicBool>,
    /// The run summary sources add to at stop.
    pub summary: Arc<Mutex<RunSummary>>,
    /// The agent's state directory (the kernel-log cursor lives there).
    pub state_dir: PathBuf,
    /// Kernel-log sequence numbers of this boot whose XIDs a previous run journaled in a sink
    /// (the kernel-log source skips them).
    pub journaled_kmsg: BTreeSet<u64>,
    /// Where batches, XIDs and call totals go.
    pub outputs: Outputs,
}

/// One ring of a running source: where its records are and where the kernel counts them.
pub struct RingMaps {
    /// Its row in the accounting table.
    pub ring: Ring,
    /// The ring buffer map.
    pub records: MapHandle,
    /// The program's per-CPU counter map (`gpuship_ring_stat` slots).
    pub kernel_counters: MapHandle,
}

/// What loading a ring source gave: the status of the source (or of each of its hooks) and,
/// when anything attached, the running source.
pub struct Loaded<'obj> {
    /// One or more statuses, in the order `gpuship run` reports them.
    pub statuses: Vec<SourceStatus>,
    /// The attached source, or `None` when nothing of it runs.
    pub running: Option<Box<dyn RunningRing + 'obj>>,
}

impl<'obj> Loaded<'obj> {
    /// Attached, with `detail` for the status.
    pub fn attached(
        source: &'static str,
        detail: impl Into<String>,
        running: Box<dyn RunningRing + 'obj>,
    ) -> Self {
        Self {
            statuses: vec![SourceStatus::attached(source, detail)],
            running: Some(running),
        }
    }

    /// Not running, and why.
    pub fn skipped(source: &'static str, reason: impl Into<String>) -> Self {
        Self {
            statuses: vec![SourceStatus::skipped(source, reason)],
            running: None,
        }
    }
}

/// A capture source fed by BPF rings. Implementations are unit structs listed in
/// [`super::REGISTRY`].
pub trait RingSource: Sync {
    /// The source's name, as statuses and logs give it.
    fn name(&self) -> &'static str;

    /// Whether it reports XIDs to the XID stage (two such sources running are reconciled).
    fn reports_xids(&self) -> bool {
        false
    }

    /// `gpuship doctor`'s checks of this source's probes and what they need, in `sources`'
    /// configuration, on the host `host` describes (a disabled source says so in one passing
    /// check). Probes are tried (load, attach, detach), not only looked for.
    fn doctor(&self, sources: &SourcesConfig, host: &HostFacts) -> Vec<Check>;

    /// Loads and attaches the program into `storage`, or says why it does not run. Never
    /// fails the agent: an error is a skipped status.
    fn load<'obj>(
        &self,
        storage: &'obj mut MaybeUninit<OpenObject>,
        setup: &SourceSetup,
    ) -> Loaded<'obj>;
}

/// An attached ring source, owned by the consumer thread.
pub trait RunningRing {
    /// Its rings, each with its accounting row and kernel counter map.
    fn rings(&self) -> anyhow::Result<Vec<RingMaps>>;

    /// Decodes one record of `ring` and batches or reports it. A malformed record is logged
    /// by the source and returned as the error; the consumer counts it.
    fn on_record(&mut self, ring: Ring, raw: &[u8]) -> Result<(), DecodeError>;

    /// Hands on what is due at `now` (everything when `all`, at stop).
    fn flush(&mut self, now: Instant, all: bool);

    /// Detaches the programs; the rings stay readable for the last drain.
    fn detach(&self);

    /// The map of traced processes, when this source records selected processes only.
    fn traced_processes(&self) -> anyhow::Result<Option<MapHandle>> {
        Ok(None)
    }

    /// At the end of the run, after the last flush: adds its totals to the run summary.
    fn finish(&mut self, _summary: &mut RunSummary) {}
}

/// How starting a thread source went.
pub enum Started {
    /// Not enabled in the configuration.
    Disabled,
    /// Running.
    Running(Box<dyn RunningThread>),
    /// Enabled but could not start, and why.
    Failed(String),
}

/// A capture source that reads on a thread of its own.
pub trait ThreadSource: Sync {
    /// The source's name.
    fn name(&self) -> &'static str;

    /// Whether it reports XIDs to the XID stage (two such sources running are reconciled).
    fn reports_xids(&self) -> bool {
        false
    }

    /// What the log says when it is enabled but cannot start (the reason follows as `err`).
    fn not_started_message(&self) -> &'static str {
        "source not started; carrying on without it"
    }

    /// `gpuship doctor`'s checks of this source's probes and what they need, in `sources`'
    /// configuration, on the host `host` describes (a disabled source says so in one passing
    /// check). Probes are tried (load, attach, detach), not only looked for.
    fn doctor(&self, sources: &SourcesConfig, host: &HostFacts) -> Vec<Check>;

    /// Starts the thread (after the ring sources are attached).
    fn start(&self, setup: &SourceSetup) -> Started;
}

/// A running thread source. It stops by itself once [`SourceSetup::stop`] is set.
pub trait RunningThread: Send {
    /// Waits for the thread to end (after the stop flag is set).
    fn join(&mut self);

    /// Once the XID stage has emitted everything it held: final bookkeeping (a cursor).
    fn finish(&self);
}
