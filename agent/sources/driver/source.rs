//! The driver source as the consumer runs it: hooks' statuses at load, records to rows (with
//! the device's name and the process's container and pod), rows to batches.

use std::mem::MaybeUninit;
use std::time::Instant;

use libbpf_rs::{MapHandle, OpenObject};

use super::batcher::DriverBatcher;
use super::decode::driver_row;
use super::devices::DeviceNames;
use super::requests::DeviceClass;
use super::unnamed::UnnamedRequests;
use super::{DriverHooks, HookStatus};
use crate::accounting::Ring;
use crate::decode::DecodeError;
use crate::diagnosis::{Check, HostFacts};
use crate::enrich::{Clocks, WorkloadResolver};
use crate::sources::config::SourcesConfig;
use crate::sources::output::Outputs;
use crate::sources::source::{
    Loaded, RingMaps, RingSource, RunningRing, SourceSetup, SourceStatus,
};

/// The driver hooks source (see [`crate::sources::REGISTRY`]).
pub struct DriverSource;

impl RingSource for DriverSource {
    fn name(&self) -> &'static str {
        "driver"
    }

    fn doctor(&self, sources: &SourcesConfig, host: &HostFacts) -> Vec<Check> {
        super::doctor::checks(&sources.driver, host)
    }

    fn load<'obj>(
        &self,
        storage: &'obj mut MaybeUninit<OpenObject>,
        setup: &SourceSetup,
    ) -> Loaded<'obj> {
        match super::load(storage, &setup.sources.driver) {
            Ok((hooks, statuses)) => Loaded {
                statuses: statuses.into_iter().map(hook_status).collect(),
                running: hooks.map(|hooks| {
                    Box::new(DriverCapture::new(hooks, setup)) as Box<dyn RunningRing + 'obj>
                }),
            },
            Err(err) => Loaded::skipped("driver_ioctl", format!("{err:#}")),
        }
    }
}

/// A hook's status as the run reports it: the ioctl hook, or a function (named in the detail).
fn hook_status(hook: HookStatus) -> SourceStatus {
    if hook.hook == "ioctl" {
        SourceStatus {
            source: "driver_ioctl",
            attached: hook.attached,
            detail: hook.detail,
        }
    } else {
        SourceStatus {
            source: "driver_function",
            attached: hook.attached,
            detail: format!("{}: {}", hook.hook, hook.detail),
        }
    }
}

/// The attached hooks and what their records need.
struct DriverCapture<'obj> {
    hooks: DriverHooks<'obj>,
    clocks: Clocks,
    /// Device names by number.
    devices: DeviceNames,
    /// Container and pod of each process, cached.
    workloads: WorkloadResolver,
    batcher: DriverBatcher,
    outputs: Outputs,
    /// NVIDIA requests without a name, per code.
    unnamed: UnnamedRequests,
    accounting: std::sync::Arc<crate::accounting::Accounting>,
}

impl<'obj> DriverCapture<'obj> {
    fn new(hooks: DriverHooks<'obj>, setup: &SourceSetup) -> Self {
        Self {
            hooks,
            clocks: setup.clocks,
            devices: DeviceNames::new("/sys/dev/char", "/dev"),
            workloads: WorkloadResolver::new(&setup.enrich.proc_dir, &setup.enrich.pod_log_dir),
            batcher: DriverBatcher::new(setup.identity.clone(), &setup.batch),
            outputs: setup.outputs.clone(),
            unnamed: UnnamedRequests::default(),
            accounting: std::sync::Arc::clone(&setup.accounting),
        }
    }
}

impl RunningRing for DriverCapture<'_> {
    fn rings(&self) -> anyhow::Result<Vec<RingMaps>> {
        let maps = &self.hooks.skel.maps;
        Ok(vec![RingMaps {
            ring: Ring::Driver,
            records: MapHandle::try_from(&maps.driver_ring)?,
            kernel_counters: MapHandle::try_from(&maps.driver_stats)?,
        }])
    }

    fn on_record(&mut self, _ring: Ring, raw: &[u8]) -> Result<(), DecodeError> {
        let slots = &self.hooks.slot_functions;
        match driver_row(raw, &self.clocks, slots, &mut self.devices) {
            Ok(mut row) => {
                if let (None, Some(request)) = (row.request_name, row.request) {
                    let class = DeviceClass::of(row.device.as_deref());
                    if class.is_nvidia() {
                        self.unnamed.record(class, request);
                        self.accounting
                            .ring(Ring::Driver)
                            .unnamed_requests
                            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                }
                row.workload = self.workloads.resolve(row.pid).cloned();
                if let Some(batch) = self.batcher.push(row) {
                    self.outputs.batches.emit(batch);
                }
                Ok(())
            }
            Err(err) => {
                tracing::debug!(%err, len = raw.len(), "malformed driver record skipped");
                Err(err)
            }
        }
    }

    fn flush(&mut self, now: Instant, all: bool) {
        self.workloads.expire_if_due(now);
        if let Some(batch) = self.batcher.flush_if_due(now, all) {
            self.outputs.batches.emit(batch);
        }
        if all && !self.unnamed.is_empty() {
            tracing::info!(requests = %self.unnamed.summary(), "unnamed NVIDIA ioctl requests by code");
        }
    }

    fn detach(&self) {
        self.hooks.detach();
    }
}
