//! The flight recorder's agent side. In `stats` mode the kernel adds hot calls up instead of
//! sending them, and also keeps each CPU's latest such calls at full detail in a ring of slots
//! (`recorder` in bpf/cuda.bpf.c). When an incident starts for a process, this module reads the
//! slots and the source writes the process's calls of the `flight_recorder_secs` before as
//! ordinary `cuda` rows marked `flight_recorder` and carrying the incident's id. In steady state
//! nothing is read and nothing is shipped.
//!
//! An incident starts for a process when:
//! - one of its calls fails with a sticky error ([`is_sticky`]: the context is unusable and
//!   every later call fails the same way), under the XID incident that already affected the
//!   process if there is one, else under a new id `<host>/pid-<pid>/<time_ns>`;
//! - an XID hit it (the XID stage's incident links).
//!
//! A process gets one dump per `flight_recorder_secs`: later sticky failures within that time
//! join the incident, and an XID incident arriving after a dump (the kernel log is often later
//! than the failed call) adds no copy of the same calls.

use std::collections::HashMap;
use std::sync::Arc;

use anyhow::Context;
use libbpf_rs::{MapCore, MapFlags};

use super::config::CudaSourceConfig;
use crate::bpf::cuda::types::{cuda_event, cuda_recorder_slot};

/// Most processes whose latest incident is remembered (the oldest are forgotten first).
const MAX_PROCESSES: usize = 4096;

/// The CUresults after which a context is unusable: an illegal address, a launch that failed,
/// timed out or hit an illegal instruction, misaligned or invalid address or PC, a hardware
/// stack error, a device-side assert, and the catch-all unknown error (cuda.h's "the context
/// cannot be used").
pub fn is_sticky(result: u32) -> bool {
    matches!(
        result,
        700 | 701 | 702 | 710 | 714 | 715 | 716 | 717 | 718 | 719 | 999
    )
}

/// How the recorder's map is sized: `cpus` rings of `1 << shift` slots, or off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecorderSize {
    /// log2 of the slots per CPU.
    pub shift: u32,
    /// CPUs the kernel may run a program on (0 when off).
    pub cpus: u32,
}

impl RecorderSize {
    /// On when functions are in `stats` mode and slots are configured.
    pub fn of(config: &CudaSourceConfig) -> anyhow::Result<Self> {
        let slots = config.flight_recorder_slots_per_cpu;
        if config.stats.is_empty() || slots == 0 || !slots.is_power_of_two() {
            return Ok(Self { shift: 0, cpus: 0 });
        }
        let cpus = libbpf_rs::num_possible_cpus().context("counting the possible CPUs")?;
        Ok(Self {
            shift: slots.trailing_zeros(),
            cpus: u32::try_from(cpus).unwrap_or(u32::MAX),
        })
    }

    /// Whether the recorder runs.
    pub fn enabled(&self) -> bool {
        self.cpus > 0
    }

    /// The map's entries (1 when off: a map cannot be empty).
    pub fn entries(&self) -> u32 {
        if self.enabled() {
            self.cpus.saturating_mul(1 << self.shift)
        } else {
            1
        }
    }
}

/// The complete calls in the recorder's slots, and how many slots were caught mid-write.
pub fn read_calls(map: &dyn MapCore) -> (Vec<cuda_event>, u64) {
    let mut calls = Vec::new();
    let mut torn = 0;
    let batches = match map.lookup_batch(4096, MapFlags::ANY, MapFlags::ANY) {
        Ok(batches) => batches,
        Err(err) => {
            tracing::warn!(%err, "cannot read the flight recorder");
            return (calls, torn);
        }
    };
    for (_, value) in batches {
        let Ok(slot) = bytemuck::try_pod_read_unaligned::<cuda_recorder_slot>(&value) else {
            torn += 1;
            continue;
        };
        match (slot.seq_begin, slot.seq_end) {
            (0, 0) => {}
            (begin, end) if begin == end => calls.push(slot.event),
            _ => torn += 1,
        }
    }
    calls.sort_by_key(|event| event.start_boot_ns);
    (calls, torn)
}

/// One process's calls to write: those from `from_ns` to `until_ns` (Unix ns).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dump {
    /// The process.
    pub pid: i32,
    /// The incident its rows carry.
    pub incident: Arc<str>,
    /// First call time written.
    pub from_ns: i64,
    /// Last call time written.
    pub until_ns: i64,
}

/// Which processes are in an incident, and the dumps to make.
#[derive(Debug)]
pub struct DumpPlan {
    host: Arc<str>,
    window_ns: i64,
    /// Per process: its latest incident and when its window ends.
    by_pid: HashMap<i32, (Arc<str>, i64)>,
    pending: Vec<Dump>,
}

/// After an XID, calls up to this much later still belong before it (the kernel log's line can
/// precede the failing call's return, and a call in flight at the fault returns after it).
const AFTER_XID_NS: i64 = 1_000_000_000;

impl DumpPlan {
    /// Dumps of `window_ns` before each incident, for rows of `host`.
    pub fn new(host: Arc<str>, window_ns: i64) -> Self {
        Self {
            host,
            window_ns,
            by_pid: HashMap::new(),
            pending: Vec::new(),
        }
    }

    fn in_window(&self, pid: i32, time_ns: i64) -> Option<Arc<str>> {
        self.by_pid
            .get(&pid)
            .filter(|(_, until)| time_ns <= *until)
            .map(|(id, _)| id.clone())
    }

    fn start(&mut self, pid: i32, incident: Arc<str>, at_ns: i64, until_ns: i64) {
        if self.by_pid.len() >= MAX_PROCESSES && !self.by_pid.contains_key(&pid) {
            // Forget the process whose window ended first.
            if let Some(oldest) = self.by_pid.iter().min_by_key(|(_, (_, until))| *until) {
                let oldest = *oldest.0;
                self.by_pid.remove(&oldest);
            }
        }
        self.by_pid.insert(
            pid,
            (incident.clone(), at_ns.saturating_add(self.window_ns)),
        );
        self.pending.push(Dump {
            pid,
            incident,
            from_ns: at_ns.saturating_sub(self.window_ns),
            until_ns,
        });
    }

    /// A call of `pid` at `time_ns` failed with a sticky error: the incident its row carries.
    /// `xid_incident` is the XID incident that affected the process then, if any.
    pub fn sticky_failure(
        &mut self,
        pid: i32,
        time_ns: i64,
        xid_incident: Option<Arc<str>>,
    ) -> Arc<str> {
        if let Some(incident) = self.in_window(pid, time_ns) {
            return incident;
        }
        let incident =
            xid_incident.unwrap_or_else(|| Arc::from(format!("{}/pid-{pid}/{time_ns}", self.host)));
        self.start(pid, incident.clone(), time_ns, time_ns);
        incident
    }

    /// An XID at `xid_ns` put `pid` in `incident`.
    pub fn xid_incident(&mut self, pid: i32, incident: Arc<str>, xid_ns: i64) {
        let known = self.by_pid.get(&pid).is_some_and(|(id, until)| {
            **id == *incident || xid_ns.saturating_sub(self.window_ns) <= *until
        });
        if !known {
            self.start(pid, incident, xid_ns, xid_ns.saturating_add(AFTER_XID_NS));
        }
    }

    /// The dumps to make now.
    pub fn take(&mut self) -> Vec<Dump> {
        std::mem::take(&mut self.pending)
    }
}

#[cfg(test)]
mod tests;
