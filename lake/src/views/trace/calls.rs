//! CUDA calls as trace events: a complete event (`ph: X`) per call, or a thread-scoped instant
//! (`ph: i`) for calls recorded at entry only, on the calling process and thread.
//!
//! Calls the flight recorder wrote (copies of the calls before an incident, in stats mode) are
//! the same events with category `cuda.flight_recorder` and `flight_recorder: true` beside the
//! `incident_id` in their args, on a track of their own per thread: tid
//! [`FLIGHT_RECORDER_TRACK_BASE`]` + tid`, named `<comm> (tid N) flight recorder`. The same call
//! may also be a row of its own (a failed or slow one); on one track the two would draw as a
//! slice nested in its twin.

use serde_json::json;

use super::args::cuda_args;
use super::{micros, Builder};
use crate::views::rows::CudaCall;

/// Thread ids of the flight recorder's tracks start here: above any Linux tid (below 2^22) and
/// below the driver's tracks ([`super::DRIVER_TRACK_BASE`], 2^30).
pub const FLIGHT_RECORDER_TRACK_BASE: i64 = 1 << 29;

/// Category of the flight recorder's calls (`cuda` for the others).
pub const FLIGHT_RECORDER_CATEGORY: &str = "cuda.flight_recorder";

impl Builder {
    pub(super) fn calls(&mut self, calls: &[CudaCall]) {
        for call in calls {
            let (pid, tid) = (i64::from(call.pid), i64::from(call.tid));
            let (track, category) = if call.flight_recorder {
                self.counts.flight_recorder += 1;
                (FLIGHT_RECORDER_TRACK_BASE + tid, FLIGHT_RECORDER_CATEGORY)
            } else {
                (tid, "cuda")
            };
            self.names
                .saw(pid, tid, &call.comm, track, || match call.flight_recorder {
                    true => format!("{} (tid {tid}) flight recorder", call.comm),
                    false => format!("{} (tid {tid})", call.comm),
                });
            let at_ns = call.time_ns.saturating_sub(self.origin);
            let mut args = cuda_args(call);
            if call.flight_recorder {
                args.insert("flight_recorder".into(), json!(true));
            }
            let mut value = json!({
                "name": call.function, "cat": category, "ts": micros(at_ns), "pid": pid,
                "tid": track, "args": args,
            });
            if call.entry_only() {
                self.counts.cuda_instant += 1;
                value["ph"] = json!("i");
                value["s"] = json!("t");
            } else {
                self.counts.cuda_complete += 1;
                value["ph"] = json!("X");
                value["dur"] = json!(call.duration_ns as f64 / 1_000.0);
            }
            self.push(at_ns, call.duration_ns, value);
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Map, Value};

    use super::*;
    use crate::views::fixtures::{cuda_batch, cuda_row, recorded_batch};
    use crate::views::rows::cuda_calls;
    use crate::views::trace::{build, Rows};

    /// Two launches the flight recorder wrote before a sticky failure, and the failure as it
    /// happened (and its copy): the copies on the thread's flight-recorder track, with their
    /// category and incident; the failure on the thread's own track.
    #[test]
    fn flight_recorded_calls_are_slices_of_their_own_track_and_category() {
        let incident = "node-a/0000:3b:00.0/3000";
        let failure = cuda_row(3_000, "cuCtxSynchronize", 700, 1_000);
        let mut calls = cuda_calls(&[cuda_batch(&[failure])]);
        calls[0].incident_id = Some(incident.into());
        calls.extend(cuda_calls(&[recorded_batch(
            &[
                cuda_row(1_000, "cuLaunchKernel", 0, 500),
                cuda_row(2_000, "cuLaunchKernel", 0, 0),
                failure,
            ],
            incident,
        )]));
        calls.sort_by_key(|c| c.time_ns);
        let rows = Rows {
            calls: &calls,
            xids: &[],
            driver: &[],
            stats: &[],
        };
        let (trace, counts) = build(rows, Map::new());
        assert_eq!(
            (
                counts.cuda_complete,
                counts.cuda_instant,
                counts.flight_recorder
            ),
            (3, 1, 3)
        );
        assert_eq!(counts.metadata, 3, "the process and its two tracks");
        let events = trace["traceEvents"].as_array().unwrap();
        let track = FLIGHT_RECORDER_TRACK_BASE + 101;
        let of = |cat: &str| -> Vec<&Value> { events.iter().filter(|e| e["cat"] == cat).collect() };
        let recorded = of(FLIGHT_RECORDER_CATEGORY);
        let found: Vec<(&str, &str, f64, i64)> = recorded
            .iter()
            .map(|e| {
                (
                    e["name"].as_str().unwrap(),
                    e["ph"].as_str().unwrap(),
                    e["ts"].as_f64().unwrap(),
                    e["tid"].as_i64().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            found,
            [
                ("cuLaunchKernel", "X", 0.0, track),
                ("cuLaunchKernel", "i", 1.0, track),
                ("cuCtxSynchronize", "X", 2.0, track)
            ]
        );
        for event in &recorded {
            assert_eq!(event["args"]["incident_id"], incident);
            assert_eq!(event["args"]["flight_recorder"], true);
            assert_eq!(event["pid"], 100);
        }
        let ordinary = of("cuda");
        assert_eq!(ordinary.len(), 1);
        assert_eq!(
            (&ordinary[0]["tid"], &ordinary[0]["args"]["incident_id"]),
            (&json!(101), &json!(incident))
        );
        assert!(ordinary[0]["args"].get("flight_recorder").is_none());
        assert!(events.iter().any(|e| e["name"] == "thread_name"
            && e["tid"] == track
            && e["args"]["name"] == "train (tid 101) flight recorder"));
    }
}
