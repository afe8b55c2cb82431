//! One screen's worth of numbers: rates from the difference of two `/live` reports (divided by
//! the difference of the agent's own uptime, so a slow poll does not inflate them), totals, and
//! the loss counters. No terminal work here.

use std::collections::HashMap;

use crate::wire::LiveReport;
use crate::wire::XidLive;

/// What the screen shows.
#[derive(Debug, Clone, PartialEq)]
pub struct Frame {
    /// The agent's address.
    pub agent: String,
    /// The agent's version.
    pub agent_version: String,
    /// Seconds since the agent started.
    pub uptime_s: f64,
    /// Records per second over all rings (None on the first report).
    pub events_per_s: Option<f64>,
    /// CUDA calls per second (None on the first report).
    pub cuda_per_s: Option<f64>,
    /// Loss and error counters, totals since start.
    pub loss: Loss,
    /// Per sink, all kinds together.
    pub sinks: Vec<SinkLine>,
    /// Functions, highest call rate first.
    pub functions: Vec<FunctionLine>,
    /// Processes, highest call rate first.
    pub processes: Vec<ProcessLine>,
    /// Processes the agent forgot to stay bounded.
    pub processes_evicted: u64,
    /// XIDs since the agent started.
    pub xids_total: u64,
    /// The latest XIDs, newest first.
    pub xids: Vec<XidLive>,
}

/// Everything that counts as loss or error, so that a non-zero one stands out.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Loss {
    /// Events lost in the kernel (ring full), all rings.
    pub kernel: u64,
    /// Events sinks dropped.
    pub sink_dropped: u64,
    /// Events lost to destination errors.
    pub sink_failed: u64,
    /// Malformed ring records.
    pub decode_errors: u64,
    /// Kernel-log records overwritten before they were read.
    pub kmsg_gaps: u64,
    /// CUDA returns without their entry.
    pub unmatched_returns: u64,
    /// CUDA calls not recorded: in-flight table full.
    pub inflight_full: u64,
}

impl Loss {
    /// Names and values, most important first.
    pub fn fields(&self) -> [(&'static str, u64); 7] {
        [
            ("kernel", self.kernel),
            ("sink_dropped", self.sink_dropped),
            ("sink_failed", self.sink_failed),
            ("decode", self.decode_errors),
            ("kmsg_gaps", self.kmsg_gaps),
            ("unmatched", self.unmatched_returns),
            ("inflight_full", self.inflight_full),
        ]
    }
}

/// One sink.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SinkLine {
    /// Name.
    pub name: String,
    /// Delivered events.
    pub delivered: u64,
    /// Events in its queue now.
    pub queued: u64,
    /// Dropped events, with the reasons that have any.
    pub dropped: u64,
    /// `reason=count` for each non-zero reason.
    pub dropped_reasons: Vec<(String, u64)>,
    /// Lost to destination errors.
    pub failed: u64,
}

/// One CUDA function.
#[derive(Debug, Clone, PartialEq)]
pub struct FunctionLine {
    /// Symbol name.
    pub name: String,
    /// Calls per second over the last interval.
    pub calls_per_s: Option<f64>,
    /// Failed calls per second over the last interval.
    pub errors_per_s: Option<f64>,
    /// Mean duration over the last interval, or since start when it had no calls; None for
    /// entry-only functions.
    pub mean_ns: Option<f64>,
    /// Calls since start.
    pub calls: u64,
    /// Failed calls since start.
    pub errors: u64,
}

/// One process.
#[derive(Debug, Clone, PartialEq)]
pub struct ProcessLine {
    /// Process id.
    pub pid: i32,
    /// Task name.
    pub comm: String,
    /// Calls per second over the last interval.
    pub calls_per_s: Option<f64>,
    /// Calls since start.
    pub calls: u64,
    /// Failed calls since start.
    pub errors: u64,
}

/// The frame for `current`, with rates against `previous` when it is an earlier report of the
/// same agent run.
pub fn frame(agent: &str, previous: Option<&LiveReport>, current: &LiveReport) -> Frame {
    let elapsed = previous
        .map(|p| current.uptime_s - p.uptime_s)
        .filter(|dt| *dt > 0.0);
    // A lower uptime means the agent restarted: its counters started again.
    let previous = previous.filter(|_| elapsed.is_some());
    let rate = |now: u64, before: Option<u64>| -> Option<f64> {
        let dt = elapsed?;
        Some(now.saturating_sub(before.unwrap_or(0)) as f64 / dt)
    };
    let received = |r: &LiveReport| r.accounting.rings.iter().map(|x| x.received).sum::<u64>();
    let cuda_calls = |r: &LiveReport| r.functions.iter().map(|f| f.calls).sum::<u64>();

    let before: HashMap<&str, _> = previous
        .map(|p| {
            p.functions
                .iter()
                .map(|f| (f.function.as_str(), f))
                .collect()
        })
        .unwrap_or_default();
    let mut functions: Vec<FunctionLine> = current
        .functions
        .iter()
        .map(|f| {
            let old = before.get(f.function.as_str());
            let calls = f.calls - old.map_or(0, |o| o.calls.min(f.calls));
            let duration =
                f.duration_ns_sum - old.map_or(0, |o| o.duration_ns_sum.min(f.duration_ns_sum));
            let mean_ns = if calls > 0 && duration > 0 {
                Some(duration as f64 / calls as f64)
            } else if f.duration_ns_sum > 0 {
                Some(f.duration_ns_sum as f64 / f.calls as f64)
            } else {
                None
            };
            FunctionLine {
                name: f.function.clone(),
                calls_per_s: rate(f.calls, old.map(|o| o.calls)),
                errors_per_s: rate(f.errors, old.map(|o| o.errors)),
                mean_ns,
                calls: f.calls,
                errors: f.errors,
            }
        })
        .collect();
    functions.sort_by(|a, b| {
        let by_rate = b
            .calls_per_s
            .unwrap_or(0.0)
            .total_cmp(&a.calls_per_s.unwrap_or(0.0));
        by_rate
            .then(b.calls.cmp(&a.calls))
            .then(a.name.cmp(&b.name))
    });

    let before: HashMap<i32, u64> = previous
        .map(|p| p.processes.iter().map(|x| (x.pid, x.calls)).collect())
        .unwrap_or_default();
    let mut processes: Vec<ProcessLine> = current
        .processes
        .iter()
        .map(|p| ProcessLine {
            pid: p.pid,
            comm: p.comm.clone(),
            calls_per_s: rate(p.calls, before.get(&p.pid).copied()),
            calls: p.calls,
            errors: p.errors,
        })
        .collect();
    processes.sort_by(|a, b| {
        let by_rate = b
            .calls_per_s
            .unwrap_or(0.0)
            .total_cmp(&a.calls_per_s.unwrap_or(0.0));
        by_rate.then(b.calls.cmp(&a.calls)).then(a.pid.cmp(&b.pid))
    });

    let accounting = &current.accounting;
    let rings = |field: fn(&crate::wire::RingReport) -> u64| -> u64 {
        accounting.rings.iter().map(field).sum()
    };
    let mut sinks: Vec<SinkLine> = Vec::new();
    for row in &accounting.sinks {
        let index = match sinks.iter().position(|s| s.name == row.sink) {
            Some(index) => index,
            None => {
                sinks.push(SinkLine {
                    name: row.sink.clone(),
                    delivered: 0,
                    // The same on every kind's row.
                    queued: row.queued_events,
                    dropped: 0,
                    dropped_reasons: Vec::new(),
                    failed: 0,
                });
                sinks.len() - 1
            }
        };
        let sink = &mut sinks[index];
        sink.delivered += row.delivered;
        sink.dropped += row.dropped;
        sink.failed += row.failed;
        for (reason, &count) in row.dropped_by_reason.iter().filter(|(_, c)| **c > 0) {
            match sink.dropped_reasons.iter_mut().find(|(r, _)| r == reason) {
                Some((_, total)) => *total += count,
                None => sink.dropped_reasons.push((reason.clone(), count)),
            }
        }
    }
    let loss = Loss {
        kernel: rings(|r| r.lost_in_kernel),
        sink_dropped: sinks.iter().map(|s| s.dropped).sum(),
        sink_failed: sinks.iter().map(|s| s.failed).sum(),
        decode_errors: rings(|r| r.decode_errors),
        kmsg_gaps: accounting.kmsg.lost_gaps,
        unmatched_returns: rings(|r| r.unmatched_returns),
        inflight_full: rings(|r| r.inflight_full),
    };

    Frame {
        agent: agent.to_string(),
        agent_version: current.agent_version.clone(),
        uptime_s: current.uptime_s,
        events_per_s: rate(received(current), previous.map(received)),
        cuda_per_s: rate(cuda_calls(current), previous.map(cuda_calls)),
        loss,
        sinks,
        functions,
        processes,
        processes_evicted: current.processes_evicted,
        xids_total: current.xids_total,
        xids: current.xids.iter().rev().cloned().collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(uptime_s: f64, launches: u64, alloc_errors: u64, lost: u64) -> LiveReport {
        serde_json::from_value(serde_json::json!({
            "version": 1, "agent_version": "0.1.0", "uptime_s": uptime_s,
            "functions": [
                {"function": "cuLaunchKernel", "calls": launches, "errors": 0,
                 "duration_ns_sum": launches * 1000},
                {"function": "cuMemAlloc_v2", "calls": 10, "errors": alloc_errors,
                 "duration_ns_sum": 0},
            ],
            "processes": [{"pid": 42, "comm": "trainer", "calls": launches + 10, "errors": 1}],
            "xids": [
                {"time_ns": 1, "code": 13, "name": "a", "category": "c", "severity": "error",
                 "action": "x", "pci_bus_id": "b", "gpu_uuid": null, "gpu_index": null,
                 "pid": null, "comm": null, "message": "m", "source": "kmsg"},
                {"time_ns": 2, "code": 79, "name": "b", "category": "c", "severity": "fatal",
                 "action": "x", "pci_bus_id": "b", "gpu_uuid": null, "gpu_index": null,
                 "pid": null, "comm": null, "message": "m", "source": "kmsg"},
            ],
            "accounting": {
                "rings": [{"ring": "cuda", "received": launches + 10, "lost_in_kernel": lost}],
                "sinks": [
                    {"sink": "lake", "kind": "xid", "delivered": 2, "queued_events": 5,
                     "dropped": 0, "dropped_by_reason": {"buffer_full": 0}},
                    {"sink": "lake", "kind": "cuda", "delivered": 100, "queued_events": 5,
                     "dropped": 3, "dropped_by_reason": {"buffer_full": 3}},
                ],
            },
        }))
        .expect("report")
    }

    #[test]
    fn rates_come_from_the_difference_of_two_reports() {
        let first = report(10.0, 100, 0, 0);
        let second = report(12.0, 300, 1, 4);
        let only = frame("a:1", None, &first);
        assert_eq!(only.cuda_per_s, None);
        assert_eq!(only.functions[0].calls_per_s, None);

        let f = frame("a:1", Some(&first), &second);
        assert_eq!(f.events_per_s, Some(100.0));
        assert_eq!(f.cuda_per_s, Some(100.0));
        let launch = &f.functions[0];
        assert_eq!(
            (
                launch.name.as_str(),
                launch.calls_per_s,
                launch.calls,
                launch.mean_ns
            ),
            ("cuLaunchKernel", Some(100.0), 300, Some(1000.0))
        );
        let alloc = &f.functions[1];
        assert_eq!(
            (alloc.errors_per_s, alloc.errors, alloc.mean_ns),
            (Some(0.5), 1, None)
        );
        assert_eq!(f.processes[0].calls_per_s, Some(100.0));
        assert_eq!(f.loss.kernel, 4);
        assert_eq!(f.loss.sink_dropped, 3);
        assert_eq!(
            f.sinks,
            vec![SinkLine {
                name: "lake".into(),
                delivered: 102,
                queued: 5,
                dropped: 3,
                dropped_reasons: vec![("buffer_full".into(), 3)],
                failed: 0,
            }]
        );
        assert_eq!(f.xids[0].code, 79, "newest first");
        // An agent that restarted (uptime went down) gives no rates, not negative ones.
        let restarted = frame("a:1", Some(&second), &report(1.0, 5, 0, 0));
        assert_eq!(restarted.cuda_per_s, None);
    }
}
