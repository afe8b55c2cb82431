//! The kernel-log reader as a thread source: started after the rings are attached when
//! `[sources.xid] kmsg` is on, joined at stop, and its cursor saved once the XID sink has
//! emitted everything it held.

use super::{spawn, KmsgContext, KmsgThread};
use crate::diagnosis::{Check, HostFacts};
use crate::sources::config::SourcesConfig;
use crate::sources::source::{RunningThread, SourceSetup, Started, ThreadSource};

/// The kernel-log source (see [`crate::sources::REGISTRY`]).
pub struct KmsgSource;

impl ThreadSource for KmsgSource {
    fn name(&self) -> &'static str {
        "kmsg"
    }

    fn doctor(&self, sources: &SourcesConfig, _host: &HostFacts) -> Vec<Check> {
        super::doctor::checks(&sources.xid)
    }

    fn reports_xids(&self) -> bool {
        true
    }

    fn not_started_message(&self) -> &'static str {
        "kernel log not readable; XIDs come from the tracepoint only"
    }

    fn start(&self, setup: &SourceSetup) -> Started {
        let config = &setup.sources.xid;
        if !config.kmsg {
            return Started::Disabled;
        }
        let context = KmsgContext {
            identity: setup.identity.clone(),
            clocks: setup.clocks,
            gpus: setup.gpus.clone(),
            accounting: setup.accounting.clone(),
            stop: setup.stop.clone(),
            xids: setup.outputs.xids.clone(),
        };
        match spawn(
            &config.kmsg_path,
            config.kmsg_start,
            Some(&setup.state_dir),
            setup.journaled_kmsg.clone(),
            context,
        ) {
            Ok(thread) => Started::Running(Box::new(thread)),
            Err(err) => Started::Failed(err.to_string()),
        }
    }
}

impl RunningThread for KmsgThread {
    fn join(&mut self) {
        KmsgThread::join(self);
    }

    fn finish(&self) {
        self.save_cursor();
    }
}
