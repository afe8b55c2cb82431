//! Incidents: XIDs on one GPU that follow each other within `window` (a cascade such as
//! 172 -> 48 -> 13, or an XID the driver says was "caused by previous Xid") share an
//! `incident_id`, and the first is marked the root-cause candidate. The ids are readable:
//! `<host>/<pci_bus_id>/<time_ns of the root>`.
//!
//! [`IncidentLinks`] lets the CUDA path tag failed calls of the processes an incident affected.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gpuship_sinks::schema::XidRecord;

#[derive(Debug)]
struct Open {
    id: Arc<str>,
    last_ns: i64,
}

/// Groups XIDs into incidents, per GPU.
#[derive(Debug)]
pub struct Incidents {
    host: String,
    window_ns: i64,
    by_gpu: HashMap<String, Open>,
}

impl Incidents {
    /// Incidents on `host`; a gap longer than `window` starts a new one.
    pub fn new(host: &str, window: Duration) -> Self {
        Self {
            host: host.to_string(),
            // Saturating: `as i64` wrapped a huge window to a small or negative one.
            window_ns: gpuship_sinks::limits::nanos_i64(window),
            by_gpu: HashMap::new(),
        }
    }

    /// Sets the record's `incident_id` and `root_candidate`; returns the incident id.
    pub fn assign(&mut self, record: &mut XidRecord) -> Arc<str> {
        let caused = record.annotations.details.caused_by_xid.is_some();
        let joins = self.by_gpu.get(&record.pci_bus_id).is_some_and(|open| {
            let gap = record.time_ns.saturating_sub(open.last_ns);
            gap <= self.window_ns || (caused && gap <= self.window_ns.saturating_mul(6))
        });
        let id = if joins {
            let open = self
                .by_gpu
                .get_mut(&record.pci_bus_id)
                .expect("checked above");
            open.last_ns = open.last_ns.max(record.time_ns);
            open.id.clone()
        } else {
            let id: Arc<str> = Arc::from(format!(
                "{}/{}/{}",
                self.host, record.pci_bus_id, record.time_ns
            ));
            self.by_gpu.insert(
                record.pci_bus_id.clone(),
                Open {
                    id: id.clone(),
                    last_ns: record.time_ns,
                },
            );
            id
        };
        record.annotations.incident_id = Some(id.to_string());
        record.annotations.root_candidate = Some(!joins);
        id
    }
}

/// An incident id and the time span (ns) during which a process's failed calls belong to it.
type Link = (Arc<str>, i64, i64);

/// Which processes an incident affected, until when: the CUDA path asks it about failed calls.
#[derive(Debug, Default)]
pub struct IncidentLinks {
    by_pid: Mutex<HashMap<i32, Link>>,
}

impl IncidentLinks {
    /// Failed calls of `pid` from `from_ns` to `until_ns` belong to `incident`.
    pub fn link(&self, pid: i32, incident: Arc<str>, from_ns: i64, until_ns: i64) {
        let mut map = self.by_pid.lock().unwrap_or_else(|e| e.into_inner());
        map.insert(pid, (incident, from_ns, until_ns));
    }

    /// The incident a failed call of `pid` at `time_ns` belongs to.
    pub fn incident_for(&self, pid: i32, time_ns: i64) -> Option<Arc<str>> {
        let map = self.by_pid.lock().unwrap_or_else(|e| e.into_inner());
        map.get(&pid)
            .filter(|(_, from, until)| (*from..=*until).contains(&time_ns))
            .map(|(id, _, _)| id.clone())
    }

    /// Every link: (pid, incident, the middle of its span, which is the XID's time).
    pub fn all(&self) -> Vec<(i32, Arc<str>, i64)> {
        let map = self.by_pid.lock().unwrap_or_else(|e| e.into_inner());
        map.iter()
            .map(|(pid, (id, from, until))| {
                let middle = from / 2 + until / 2 + (from % 2 + until % 2) / 2;
                (*pid, id.clone(), middle)
            })
            .collect()
    }

    /// Forgets links that ended before `now_ns`.
    pub fn prune(&self, now_ns: i64) {
        let mut map = self.by_pid.lock().unwrap_or_else(|e| e.into_inner());
        map.retain(|_, (_, _, until)| *until >= now_ns);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuship_sinks::schema::XidSource;

    fn xid(code: u32, bus: &str, time_ns: i64) -> XidRecord {
        XidRecord {
            code,
            pci_bus_id: bus.into(),
            time_ns,
            ..XidRecord::new(XidSource::Kmsg)
        }
    }

    const S: i64 = 1_000_000_000;

    #[test]
    fn a_cascade_on_one_gpu_is_one_incident_rooted_at_its_first_xid() {
        let mut incidents = Incidents::new("node", Duration::from_secs(10));
        let mut cascade = [
            xid(172, "0000:3b:00.0", 100 * S),
            xid(48, "0000:3b:00.0", 101 * S),
            xid(31, "0000:86:00.0", 101 * S),
            xid(13, "0000:3b:00.0", 109 * S),
            xid(13, "0000:3b:00.0", 125 * S),
        ];
        for record in &mut cascade {
            incidents.assign(record);
        }
        let ids: Vec<&str> = cascade
            .iter()
            .map(|r| r.annotations.incident_id.as_deref().unwrap())
            .collect();
        let roots: Vec<bool> = cascade
            .iter()
            .map(|r| r.annotations.root_candidate.unwrap())
            .collect();
        assert_eq!(ids[0], "node/0000:3b:00.0/100000000000");
        assert_eq!(ids[1], ids[0]);
        assert_eq!(ids[3], ids[0], "8 s after the previous one: same incident");
        assert_eq!(ids[2], "node/0000:86:00.0/101000000000", "another GPU");
        assert_eq!(
            ids[4], "node/0000:3b:00.0/125000000000",
            "16 s later: a new incident"
        );
        assert_eq!(roots, [true, false, true, false, true]);
    }

    #[test]
    fn caused_by_joins_a_longer_gap() {
        let mut incidents = Incidents::new("n", Duration::from_secs(10));
        let mut first = xid(48, "0000:3b:00.0", 0);
        incidents.assign(&mut first);
        let mut later = xid(45, "0000:3b:00.0", 30 * S);
        later.annotations.details.caused_by_xid = Some(48);
        incidents.assign(&mut later);
        assert_eq!(later.annotations.incident_id, first.annotations.incident_id);
        assert_eq!(later.annotations.root_candidate, Some(false));
    }

    #[test]
    fn a_huge_window_saturates_instead_of_wrapping() {
        // u64::MAX seconds in ns cast to i64 wrapped to a negative window: two XIDs 1 s apart
        // became two incidents. Validation bounds the window; the arithmetic must hold anyway.
        for window in [Duration::from_secs(u64::MAX), Duration::MAX] {
            let mut incidents = Incidents::new("n", window);
            let mut first = xid(79, "0000:3b:00.0", i64::MIN / 2);
            let mut second = xid(48, "0000:3b:00.0", i64::MIN / 2 + S);
            let mut caused = xid(45, "0000:3b:00.0", i64::MAX);
            caused.annotations.details.caused_by_xid = Some(48);
            incidents.assign(&mut first);
            incidents.assign(&mut second);
            incidents.assign(&mut caused);
            assert_eq!(
                second.annotations.incident_id,
                first.annotations.incident_id
            );
            assert_eq!(
                caused.annotations.incident_id,
                first.annotations.incident_id
            );
            assert_eq!(second.annotations.root_candidate, Some(false));
        }
    }

    #[test]
    fn links_cover_their_time_span_only() {
        let links = IncidentLinks::default();
        links.link(42, Arc::from("inc"), 10, 20);
        assert_eq!(links.incident_for(42, 15).as_deref(), Some("inc"));
        assert_eq!(links.incident_for(42, 9), None);
        assert_eq!(links.incident_for(42, 21), None);
        assert_eq!(links.incident_for(43, 15), None);
        links.prune(21);
        assert_eq!(links.incident_for(42, 15), None);
    }
}
