//! The consumer thread: owns the BPF programs, drains their rings, decodes records and hands
//! batches to the fan-out.
//!
//! The XID ring wakes this thread at every record; the CUDA ring does not (see
//! `bpf/cuda.bpf.c`) and is drained every `drain_interval_ms` or when it fills past its
//! threshold. At stop the probes are detached first, then the rings are drained to the last
//! record, so that what the kernel emitted and what the agent received can be compared exactly.
//! `records` turns each ring record into rows and batches; `priority` gives this thread the CPU
//! it needs when the traced processes keep every CPU busy.

pub mod priority;
mod records;

use std::cell::RefCell;
use std::collections::HashMap;
use std::mem::MaybeUninit;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use libbpf_rs::{MapHandle, RingBufferBuilder};

use crate::accounting::Ring;
use crate::batcher::{CudaBatcher, DriverBatcher};
use crate::capture::CaptureContext;
use crate::config::{
    BatchConfig, CudaSourceConfig, DriverSourceConfig, EnrichConfig, XidSourceConfig,
};
use crate::decode::Decoder;
use crate::enrich::WorkloadResolver;
use crate::live::LivePublisher;
use crate::sources::cuda::plan::FunctionTable;
use crate::sources::cuda::probes::{self, ProcessFilter};
use crate::sources::driver::{self, devices::DeviceNames};
use crate::sources::xid_tracepoint;
use crate::summary::{CallTally, RunSummary};

use records::{hand_on, on_cuda_record, on_driver_record, on_xid_record, State};

/// What to load.
#[derive(Debug, Clone)]
pub struct ConsumerSettings {
    /// `[sources.xid]`.
    pub xid: XidSourceConfig,
    /// `[sources.cuda]`.
    pub cuda: CudaSourceConfig,
    /// `[sources.driver]`.
    pub driver: DriverSourceConfig,
    /// `[batch]`.
    pub batch: BatchConfig,
    /// `[enrich]` (where processes' cgroups and pod folders are).
    pub enrich: EnrichConfig,
    /// Which processes CUDA probes record.
    pub filter: ProcessFilter,
    /// tracefs root, when found.
    pub tracefs: Option<PathBuf>,
}

/// Whether each BPF source attached, and why not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceStatus {
    /// `xid_tracepoint` or `cuda`.
    pub source: &'static str,
    /// True when attached.
    pub attached: bool,
    /// Details or the reason it is not attached.
    pub detail: String,
}

/// Sent once the programs are attached (or known not to be).
pub struct Ready {
    /// Each BPF source's status.
    pub sources: Vec<SourceStatus>,
    /// The traced-process map, when CUDA probes run with [`ProcessFilter::Selected`].
    pub traced_tgids: Option<MapHandle>,
}

/// Starts the consumer thread. The receiver yields one [`Ready`] (or the fatal error).
pub fn spawn(
    settings: ConsumerSettings,
    context: CaptureContext,
) -> (JoinHandle<()>, mpsc::Receiver<anyhow::Result<Ready>>) {
    let (ready_tx, ready_rx) = mpsc::channel();
    priority::raise_sink_library_threads();
    let handle = std::thread::Builder::new()
        .name("gpuship-consumer".into())
        .spawn(move || {
            priority::raise_consumer();
            if let Err(err) = run(&settings, &context, &ready_tx) {
                tracing::error!(error = format!("{err:#}"), "consumer failed");
                let _ = ready_tx.send(Err(err));
            }
        })
        .expect("spawning the consumer thread");
    (handle, ready_rx)
}

fn run(
    settings: &ConsumerSettings,
    context: &CaptureContext,
    ready: &mpsc::Sender<anyhow::Result<Ready>>,
) -> anyhow::Result<()> {
    let mut statuses = Vec::new();
    let mut xid_storage = MaybeUninit::uninit();
    let xid = match (&settings.tracefs, settings.xid.tracepoint) {
        (_, false) => {
            statuses.push(SourceStatus {
                source: "xid_tracepoint",
                attached: false,
                detail: "disabled in config".into(),
            });
            None
        }
        (None, true) => {
            statuses.push(SourceStatus {
                source: "xid_tracepoint",
                attached: false,
                detail: "tracefs is not available".into(),
            });
            None
        }
        (Some(tracefs), true) => {
            match xid_tracepoint::load(&mut xid_storage, &settings.xid, tracefs) {
                Ok(Ok(loaded)) => {
                    statuses.push(SourceStatus {
                        source: "xid_tracepoint",
                        attached: true,
                        detail: settings.xid.tracepoint_name.clone(),
                    });
                    Some(loaded)
                }
                Ok(Err(reason)) => {
                    statuses.push(SourceStatus {
                        source: "xid_tracepoint",
                        attached: false,
                        detail: reason,
                    });
                    None
                }
                Err(err) => {
                    statuses.push(SourceStatus {
                        source: "xid_tracepoint",
                        attached: false,
                        detail: format!("{err:#}"),
                    });
                    None
                }
            }
        }
    };
    let mut cuda_storage = MaybeUninit::uninit();
    let cuda = if settings.cuda.enabled {
        match probes::load(&mut cuda_storage, &settings.cuda, settings.filter) {
            Ok(Ok(loaded)) => {
                statuses.push(SourceStatus {
                    source: "cuda",
                    attached: true,
                    detail: format!("{} symbols", loaded.probed_symbols),
                });
                Some(loaded)
            }
            Ok(Err(reason)) => {
                statuses.push(SourceStatus {
                    source: "cuda",
                    attached: false,
                    detail: reason,
                });
                None
            }
            Err(err) => {
                statuses.push(SourceStatus {
                    source: "cuda",
                    attached: false,
                    detail: format!("{err:#}"),
                });
                None
            }
        }
    } else {
        statuses.push(SourceStatus {
            source: "cuda",
            attached: false,
            detail: "disabled in config".into(),
        });
        None
    };
    let mut driver_storage = MaybeUninit::uninit();
    let driver = match driver::load(&mut driver_storage, &settings.driver) {
        Ok((loaded, hooks)) => {
            for hook in hooks {
                statuses.push(SourceStatus {
                    source: if hook.hook == "ioctl" {
                        "driver_ioctl"
                    } else {
                        "driver_function"
                    },
                    attached: hook.attached,
                    detail: if hook.hook == "ioctl" {
                        hook.detail
                    } else {
                        format!("{}: {}", hook.hook, hook.detail)
                    },
                });
            }
            loaded
        }
        Err(err) => {
            statuses.push(SourceStatus {
                source: "driver_ioctl",
                attached: false,
                detail: format!("{err:#}"),
            });
            None
        }
    };
    for status in statuses.iter().filter(|s| !s.attached) {
        tracing::warn!(source = status.source, reason = %status.detail, "source not attached; carrying on without it");
    }

    let functions = cuda
        .as_ref()
        .map(|c| c.functions.clone())
        .unwrap_or_else(FunctionTable::default);
    let live = LivePublisher::new(functions.clone());
    let state = RefCell::new(State {
        decoder: Decoder::new(context.clocks, functions, context.gpus.clone()),
        cuda: CudaBatcher::new(context.identity.clone(), &settings.batch),
        summary: RunSummary::default(),
        calls: CallTally::default(),
        driver: DriverBatcher::new(context.identity.clone(), &settings.batch),
        devices: DeviceNames::new("/sys/dev/char", "/dev"),
        slot_functions: driver
            .as_ref()
            .map(|d| d.slot_functions.clone())
            .unwrap_or_default(),
        active: HashMap::new(),
        last_active: (0, 0),
        workloads: WorkloadResolver::new(&settings.enrich.proc_dir, &settings.enrich.pod_log_dir),
        live,
    });
    let accounting = &context.accounting;
    let mut builder = RingBufferBuilder::new();
    if let Some(xid) = &xid {
        builder.add(&xid.skel.maps.xid_ring, |raw: &[u8]| {
            on_xid_record(raw, &state, context);
            0
        })?;
    }
    if let Some(cuda) = &cuda {
        builder.add(&cuda.skel.maps.cuda_ring, |raw: &[u8]| {
            on_cuda_record(raw, &state, context);
            0
        })?;
    }
    if let Some(driver) = &driver {
        builder.add(&driver.skel.maps.driver_ring, |raw: &[u8]| {
            on_driver_record(raw, &state, context);
            0
        })?;
    }
    let traced_tgids = match (&cuda, settings.filter) {
        (Some(cuda), ProcessFilter::Selected) => Some(cuda.traced_tgids()?),
        _ => None,
    };
    let rings = if xid.is_some() || cuda.is_some() || driver.is_some() {
        Some(builder.build()?)
    } else {
        None
    };
    let _ = ready.send(Ok(Ready {
        sources: statuses,
        traced_tgids,
    }));
    let Some(rings) = rings else { return Ok(()) };

    let drain = Duration::from_millis(settings.cuda.drain_interval_ms);
    // Kernel counters are read live by every snapshot (see Accounting::attach_kernel_counters).
    if let Some(xid) = &xid {
        accounting
            .attach_kernel_counters(Ring::Xid, MapHandle::try_from(&xid.skel.maps.xid_stats)?);
    }
    if let Some(cuda) = &cuda {
        accounting
            .attach_kernel_counters(Ring::Cuda, MapHandle::try_from(&cuda.skel.maps.cuda_stats)?);
    }
    if let Some(driver) = &driver {
        accounting.attach_kernel_counters(
            Ring::Driver,
            MapHandle::try_from(&driver.skel.maps.driver_stats)?,
        );
    }
    while !context.stop.load(Ordering::Acquire) {
        // EINTR and the like only shorten a cycle.
        let _ = rings.poll(drain);
        let _ = rings.consume();
        hand_on(&state, context, false);
    }

    if let Some(xid) = &xid {
        xid.detach();
    }
    if let Some(cuda) = &cuda {
        cuda.detach();
    }
    if let Some(driver) = &driver {
        driver.detach();
    }
    // A program that was running on another CPU while we detached finishes within
    // microseconds; give it that, then take everything that is left.
    std::thread::sleep(Duration::from_millis(20));
    let _ = rings.consume();
    hand_on(&state, context, true);
    let mut summary = std::mem::take(&mut state.borrow_mut().summary);
    let calls = std::mem::take(&mut state.borrow_mut().calls);
    if let Some(cuda) = &cuda {
        calls.add_to(&mut summary, |id| cuda.functions.name(id));
    }
    if let Ok(mut shared) = context.summary.lock() {
        shared.merge(summary);
    }
    tracing::info!("consumer drained all rings");
    Ok(())
}
