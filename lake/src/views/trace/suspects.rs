//! An XID's suspect kernels on the trace: each suspect is a thread-scoped instant event on the
//! XID's GPU track at the time it was launched (category `suspect`, named
//! `suspect N: <kernel>`, the likely culprit marked), and the XID's own event lists them in
//! its `args.suspects` ([`super::args::xid_args`]). So the GPU's track reads: the kernels
//! launched, then the XID that the first one not completed probably caused.

use serde_json::json;

use super::{micros, Builder, GPU_PID};
use crate::views::rows::{headline, Xid};

/// Category of the suspects' events.
pub const SUSPECT_CATEGORY: &str = "suspect";

impl Builder {
    pub(super) fn suspects(&mut self, xids: &[Xid]) {
        for xid in xids.iter().filter(|x| !x.suspects.is_empty()) {
            let tid = self.names.gpu(xid);
            let culprit = headline(&xid.suspects);
            for (i, suspect) in xid.suspects.iter().enumerate() {
                self.counts.suspects += 1;
                let at_ns = suspect.time_ns.saturating_sub(self.origin);
                let likely = culprit == Some(i);
                let marker = if likely { " (likely culprit)" } else { "" };
                let value = json!({
                    "name": format!("suspect {}: {}{marker}", i + 1, suspect.kernel),
                    "cat": SUSPECT_CATEGORY, "ph": "i", "s": "t", "ts": micros(at_ns),
                    "pid": GPU_PID, "tid": tid,
                    "args": {
                        "rank": i + 1, "kernel": suspect.kernel, "function": suspect.function,
                        "completed": suspect.completed, "likely_culprit": likely,
                        "pid": xid.pid, "tid": suspect.tid, "xid": xid.code,
                        "incident_id": xid.incident_id,
                    },
                });
                self.push(at_ns, 0, value);
            }
        }
    }
}

/// Launch times of the suspects of `xids`, which may precede every other event.
pub fn times(xids: &[Xid]) -> impl Iterator<Item = i64> + '_ {
    xids.iter()
        .flat_map(|x| x.suspects.iter().map(|s| s.time_ns))
}

#[cfg(test)]
mod tests {
    use gpuship_sinks::schema::KernelSuspect;
    use serde_json::{Map, Value};

    use crate::views::fixtures::{xid_batch, xid_record};
    use crate::views::rows::xids;
    use crate::views::trace::{build, Rows};

    /// An XID 31 whose process launched a hostile-named kernel (finished) and then
    /// `wild_write` (not seen to finish): both on the GPU's track before the XID, the second
    /// marked, and listed in the XID's args; the origin is the earliest launch.
    fn of<'a>(events: &'a [Value], cat: &str) -> Vec<&'a Value> {
        events.iter().filter(|e| e["cat"] == cat).collect()
    }

    #[test]
    fn suspects_are_instants_on_the_gpu_track_and_in_the_xid_args() {
        let hostile = "evil\n\u{1b}[31mname\"'<b>";
        let mut xid = xid_record(5_000_000, 31, "0000:3b:00.0", "error", "MMU Fault");
        xid.annotations.suspects = Some(vec![
            KernelSuspect {
                time_ns: 4_000_000,
                function: "cuLaunchKernel".into(),
                kernel_name_demangled: "wild_write(int*)".into(),
                ..KernelSuspect::default()
            },
            KernelSuspect {
                time_ns: 1_000_000,
                function: "cuLaunchKernelEx".into(),
                kernel_name_demangled: hostile.into(),
                completed: true,
                ..KernelSuspect::default()
            },
        ]);
        let xids = xids(&[xid_batch(&[xid])]);
        let rows = Rows {
            calls: &[],
            xids: &xids,
            driver: &[],
            stats: &[],
        };
        let (trace, counts) = build(rows, Map::new());
        assert_eq!((counts.xid, counts.suspects), (1, 2));
        let events = trace["traceEvents"].as_array().unwrap();
        let of = |cat: &str| of(events, cat);
        assert_eq!(events.len(), counts.total());
        let suspects = of("suspect");
        let seen: Vec<(&str, f64, i64, bool)> = suspects
            .iter()
            .map(|e| {
                (
                    e["name"].as_str().unwrap(),
                    e["ts"].as_f64().unwrap(),
                    e["tid"].as_i64().unwrap(),
                    e["args"]["likely_culprit"].as_bool().unwrap(),
                )
            })
            .collect();
        let gpu = of("xid")[0]["tid"].as_i64().unwrap();
        assert_eq!(
            seen,
            [
                ("suspect 2: evil\n\u{1b}[31mname\"'<b>", 0.0, gpu, false),
                (
                    "suspect 1: wild_write(int*) (likely culprit)",
                    3_000.0,
                    gpu,
                    true
                ),
            ]
        );
        assert!(suspects.iter().all(|e| e["pid"] == 0 && e["s"] == "t"));
        let listed = &of("xid")[0]["args"]["suspects"];
        assert_eq!(listed[0]["kernel"], "wild_write(int*)");
        assert_eq!(listed[1]["kernel"], hostile);
        assert_eq!(listed[1]["completed"], true);
        assert_eq!(of("xid")[0]["ts"].as_f64(), Some(4_000.0));
        // JSON escapes the control characters: the document holds none raw.
        let text = serde_json::to_string(&trace).unwrap();
        assert!(!text.chars().any(|c| c.is_control()), "{text}");
    }
}
