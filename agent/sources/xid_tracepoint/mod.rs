//! XIDs from the driver's tracepoint, through `bpf/xid.bpf.c`: [`program`] loads and attaches the program,
//! [`decode`] turns its records into XID rows, which go to the XID sink (reconciled with the
//! kernel log's, annotated and sent downstream there).

pub mod decode;
pub mod doctor;
pub mod program;
mod records;

use std::mem::MaybeUninit;
use std::sync::Arc;
use std::time::Instant;

use libbpf_rs::{MapHandle, OpenObject};

pub use program::{load, parse_format, FieldLayout, XidTracepoint};

use super::output::XidSink;
use super::source::{Loaded, RingMaps, RingSource, RunningRing, SourceSetup};
use super::tracefs;
use crate::accounting::Ring;
use crate::decode::DecodeError;
use crate::diagnosis::{Check, HostFacts};
use crate::enrich::{Clocks, GpuDirectory};
use crate::sources::config::SourcesConfig;

/// The source's name in statuses.
const NAME: &str = "xid_tracepoint";

/// The XID tracepoint source (see [`super::REGISTRY`]).
pub struct XidTracepointSource;

impl RingSource for XidTracepointSource {
    fn name(&self) -> &'static str {
        NAME
    }

    fn doctor(&self, sources: &SourcesConfig, host: &HostFacts) -> Vec<Check> {
        doctor::checks(&sources.xid, host)
    }

    fn reports_xids(&self) -> bool {
        true
    }

    fn load<'obj>(
        &self,
        storage: &'obj mut MaybeUninit<OpenObject>,
        setup: &SourceSetup,
    ) -> Loaded<'obj> {
        let config = &setup.sources.xid;
        if !config.tracepoint {
            return Loaded::skipped(NAME, "disabled in config");
        }
        let tracefs = match tracefs::ensure_mounted() {
            Ok(root) => root,
            Err(reason) => {
                tracing::warn!(%reason, "no tracefs");
                return Loaded::skipped(NAME, "tracefs is not available");
            }
        };
        match load(storage, config, &tracefs) {
            Ok(Ok(program)) => Loaded::attached(
                NAME,
                config.tracepoint_name.clone(),
                Box::new(XidCapture {
                    program,
                    clocks: setup.clocks,
                    gpus: setup.gpus.clone(),
                    xids: setup.outputs.xids.clone(),
                }),
            ),
            Ok(Err(reason)) => Loaded::skipped(NAME, reason),
            Err(err) => Loaded::skipped(NAME, format!("{err:#}")),
        }
    }
}

/// The attached program and what its records need.
struct XidCapture<'obj> {
    program: XidTracepoint<'obj>,
    clocks: Clocks,
    gpus: Arc<GpuDirectory>,
    xids: Arc<dyn XidSink>,
}

impl RunningRing for XidCapture<'_> {
    fn rings(&self) -> anyhow::Result<Vec<RingMaps>> {
        let maps = &self.program.skel.maps;
        Ok(vec![RingMaps {
            ring: Ring::Xid,
            records: MapHandle::try_from(&maps.xid_ring)?,
            kernel_counters: MapHandle::try_from(&maps.xid_stats)?,
        }])
    }

    fn on_record(&mut self, _ring: Ring, raw: &[u8]) -> Result<(), DecodeError> {
        match decode::xid_record(raw, &self.clocks, &self.gpus) {
            // Reconciled, annotated, logged and sent by the XID sink.
            Ok(record) => {
                self.xids.report(record);
                Ok(())
            }
            Err(err) => {
                tracing::error!(%err, len = raw.len(), "malformed XID record skipped");
                Err(err)
            }
        }
    }

    fn flush(&mut self, _now: Instant, _all: bool) {}

    fn detach(&self) {
        self.program.detach();
    }
}
