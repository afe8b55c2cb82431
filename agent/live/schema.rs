//! The JSON document `GET /live` answers (schema version [`LIVE_VERSION`]). The lists in it
//! are the wire types of the `gpuship-top` crate ([`gpuship_top::wire`]), so the daemon that
//! writes them and `gpuship top` that reads them share one definition; this module adds the
//! whole document, whose counters are the daemon's own [`Snapshot`], and the live view of an
//! XID record.

use gpuship_sinks::schema::XidRecord;
use serde::Serialize;

use crate::accounting::Snapshot;
use gpuship_catalog as catalog;

pub use gpuship_top::wire::{FunctionLive, ProcessLive, XidLive, LIVE_VERSION};

/// The whole `/live` document.
#[derive(Debug, Clone, Serialize)]
pub struct LiveSnapshot {
    /// [`LIVE_VERSION`].
    pub version: u32,
    /// The agent's version.
    pub agent_version: &'static str,
    /// Seconds since the agent started capturing; readers divide count differences by
    /// differences of this (the agent's clock, not the reader's).
    pub uptime_s: f64,
    /// Per CUDA function with at least one call, since start.
    pub functions: Vec<FunctionLive>,
    /// Per process with at least one CUDA call, since start, most calls first (at most
    /// `MAX_PROCESSES`, least recently seen forgotten first).
    pub processes: Vec<ProcessLive>,
    /// Processes forgotten to stay within `MAX_PROCESSES`.
    pub processes_evicted: u64,
    /// XIDs since start.
    pub xids_total: u64,
    /// The latest XIDs (at most `MAX_XIDS`), oldest first.
    pub xids: Vec<XidLive>,
    /// The agent's counters, as in `--summary-json`.
    pub accounting: Snapshot,
}

/// The live view of an annotated record (the catalog fills what annotation left out).
pub fn xid_live(record: &XidRecord) -> XidLive {
    let a = &record.annotations;
    let info = || catalog::lookup(record.code);
    XidLive {
        time_ns: record.time_ns,
        code: record.code,
        name: a.name.clone().unwrap_or_else(|| info().name),
        category: a.category.clone().unwrap_or_else(|| info().category.into()),
        severity: a.severity.clone().unwrap_or_else(|| info().severity.into()),
        action: a.action.clone().unwrap_or_else(|| info().action.into()),
        pci_bus_id: record.pci_bus_id.clone(),
        gpu_uuid: record.gpu.as_ref().map(|g| g.uuid.clone()),
        gpu_index: record.gpu.as_ref().map(|g| g.index),
        pid: record.pid,
        comm: record.comm.clone(),
        message: record.message.clone(),
        source: record.source.as_str().into(),
    }
}

#[cfg(test)]
mod tests {
    use gpuship_top::client::parse_body;

    use super::LIVE_VERSION;
    use crate::accounting::Accounting;
    use crate::live::LiveTap;

    /// `gpuship top` reads the document the agent serves.
    #[test]
    fn reads_what_the_agent_serves() {
        let tap = LiveTap::new();
        let json = tap.json(Accounting::default().snapshot());
        let report = parse_body("a:1", 200, json.as_bytes()).expect("parses");
        assert_eq!(report.version, LIVE_VERSION);
        assert_eq!(report.accounting.rings.len(), 3);
        assert_eq!(report.accounting.rings[1].ring, "cuda");
    }
}
