//! An XID's suspects: for codes that point at a kernel running on the GPU, the kernels the
//! attributed process launched last before the XID (from the CUDA source's launch history).

use gpuship_sinks::schema::{KernelSuspect, XidRecord};

use crate::sources::output::LaunchHistory;

/// Codes whose fault happened in, or was caused by, a kernel running on the GPU: a graphics or
/// compute engine exception (13), an MMU fault (31), a channel stopped by a software fault
/// (43), a graphics class error (69), an ECC or poison error contained to (94) or escaping
/// from (95) the channel that consumed it, and a context-switch timeout (109, a kernel that
/// did not yield).
pub const KERNEL_FAULT_CODES: [u32; 7] = [13, 31, 43, 69, 94, 95, 109];

/// The suspects of `record` (after attribution): None when they are not looked for (another
/// code, no attributed process, no history, or `max` is 0).
pub fn find(
    record: &XidRecord,
    history: Option<&dyn LaunchHistory>,
    max: usize,
) -> Option<Vec<KernelSuspect>> {
    if max == 0 || !KERNEL_FAULT_CODES.contains(&record.code) {
        return None;
    }
    let pid = record.pid?;
    let bus_id = Some(record.pci_bus_id.as_str()).filter(|b| !b.is_empty());
    Some(history?.suspects(pid, bus_id, record.time_ns, max))
}

/// Whether `record`'s suspects (when looked for) come from a window in which the overhead
/// budget probed the attributed process's launches only part of the time.
pub fn sampled(record: &XidRecord, history: Option<&dyn LaunchHistory>) -> Option<bool> {
    record.annotations.suspects.as_ref()?;
    let pid = record.pid?;
    Some(history?.launches_sampled_before(pid, record.time_ns))
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuship_sinks::schema::XidSource;

    struct Fixed;

    impl LaunchHistory for Fixed {
        fn launches_sampled_before(&self, pid: i32, _before_ns: i64) -> bool {
            pid == 9
        }

        fn suspects(
            &self,
            pid: i32,
            _bus_id: Option<&str>,
            before_ns: i64,
            max: usize,
        ) -> Vec<KernelSuspect> {
            vec![
                KernelSuspect {
                    tid: pid,
                    time_ns: before_ns,
                    kernel_name: "wild_write".into(),
                    ..KernelSuspect::default()
                };
                max
            ]
        }
    }

    fn xid(code: u32, pid: Option<i32>) -> XidRecord {
        XidRecord {
            code,
            pid,
            time_ns: i64::MAX,
            ..XidRecord::new(XidSource::Kmsg)
        }
    }

    #[test]
    fn only_kernel_faults_of_an_attributed_process_are_looked_at() {
        let history: Option<&dyn LaunchHistory> = Some(&Fixed);
        let found = find(&xid(31, Some(7)), history, 8).unwrap();
        assert_eq!(found.len(), 8);
        assert_eq!((found[0].tid, found[0].time_ns), (7, i64::MAX));
        assert_eq!(find(&xid(13, Some(i32::MAX)), history, 1).unwrap().len(), 1);
        assert_eq!(find(&xid(79, Some(7)), history, 8), None);
        assert_eq!(find(&xid(48, Some(7)), history, 8), None);
        assert_eq!(find(&xid(31, None), history, 8), None);
        assert_eq!(find(&xid(31, Some(7)), None, 8), None);
        assert_eq!(find(&xid(31, Some(7)), history, 0), None);
    }

    #[test]
    fn suspects_say_whether_their_window_was_sampled_only_when_looked_for() {
        let history: Option<&dyn LaunchHistory> = Some(&Fixed);
        let looked_for = |code, pid| {
            let mut record = xid(code, pid);
            record.annotations.suspects = find(&record, history, 8);
            record
        };
        assert_eq!(sampled(&looked_for(31, Some(9)), history), Some(true));
        assert_eq!(sampled(&looked_for(31, Some(7)), history), Some(false));
        // No suspects looked for (another code, no process): no answer either.
        assert_eq!(sampled(&looked_for(79, Some(9)), history), None);
        assert_eq!(sampled(&looked_for(31, None), history), None);
        assert_eq!(sampled(&looked_for(31, Some(9)), None), None);
    }
}
