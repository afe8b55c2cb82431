//! `gpuship-lake report` and `export-trace` over lakes of stats mode (no agent): a daemon's
//! lake of aggregates only, and aggregates beside the rows of a slow and a failed call, each
//! counted once. Every expected number is worked out in the comments; empty tables and hostile
//! values are in stats_views_edges.rs.

mod support;

use gpuship_sinks::schema::{xid_batch_of, CudaBatchBuilder, XidRecord, XidSource};
use serde_json::{json, Value};
use support::*;

/// The daemon's default: launches and copies only as aggregates, no `cuda` table at all.
#[test]
fn stats_lake_of_aggregates_only_is_reported_and_exported() {
    let dir = tempfile::tempdir().unwrap();
    let lake = dir.path();
    write_stats(
        lake,
        &[
            stats(
                T0 + 20 * S,
                "cuLaunchKernel",
                600,
                Some(durations(
                    (4_100, 6_000, 2_800_000),
                    &[(4_096, 5_120, 400), (5_120, 6_144, 200)],
                )),
            ),
            stats(
                T0 + 30 * S,
                "cuLaunchKernel",
                400,
                Some(durations(
                    (4_200, 6_100, 2_100_000),
                    &[(4_096, 5_120, 100), (5_120, 6_144, 300)],
                )),
            ),
            stats(
                T0 + 20 * S,
                "cuMemcpyAsync",
                50,
                Some(durations(
                    (16_400, 20_000, 900_000),
                    &[(16_384, 20_480, 50)],
                )),
            ),
        ],
    );
    let (code, stderr, html) = view("report", lake);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stderr.contains("gpuship report: 0 XIDs in 0 incident(s), 1050 CUDA calls (0 failed), 1050 of them from cuda_stats, from 1 file(s)"), "{stderr}");
    assert!(html.contains("id=\"count-cuda\"><b>1050</b>"));
    assert!(html.contains("id=\"count-aggregated\"><b>1050</b>"));
    assert!(html.contains("id=\"stats-rule\""));
    // Launches: 1,000 calls over 3,600 s; buckets merged to 500 + 500, min 4,100, max 6,100;
    // mean 4,900,000 / 1,000; p50 (rank 500) ends the first bucket, 5,120; p99 (rank 990) is
    // 490/500 into [5120, 6101): 6,081.
    assert_eq!(
        function_row(&html, "cuLaunchKernel"),
        cells(&[
            "cuLaunchKernel",
            "1000",
            "0.278",
            "0",
            "4.90 µs",
            "5.12 µs",
            "6.08 µs",
            "1000"
        ])
    );
    // Copies: [16400, 20001) by min and max; rank 25 halfway: 18,200; rank 49.5: 19,964.
    assert_eq!(
        function_row(&html, "cuMemcpyAsync"),
        cells(&[
            "cuMemcpyAsync",
            "50",
            "0.014",
            "0",
            "18.0 µs",
            "18.2 µs",
            "20.0 µs",
            "50"
        ])
    );
    assert!(
        html.find("data-function=\"cuLaunchKernel\"")
            < html.find("data-function=\"cuMemcpyAsync\"")
    );

    let (code, stderr, json) = view("export-trace", lake);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stderr.contains("16 events (0 CUDA calls, 0 of them entry-only; 0 XIDs; 0 driver operations; 1 names; 15 counter samples from 3 cuda_stats rows) from 1 file(s)"), "{stderr}");
    let trace: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(
        trace["otherData"]["origin_time_ns"],
        T0 + 10 * S,
        "the first interval's start"
    );
    // Per interval: calls/s, the mean, and the p99 of its own rows (10..20 s: rank 594 is
    // 194/200 into [5120, 6001): 5,974; 20..30 s: 296/300 into [5120, 6101): 6,087).
    let ms = |s: i64| (s * 1_000_000) as f64;
    let mut expected = vec![
        ("cuLaunchKernel calls", ms(0), 60.0),
        ("cuLaunchKernel mean latency", ms(0), 4_666.0),
        ("cuLaunchKernel p99 latency", ms(0), 5_974.0),
        ("cuLaunchKernel calls", ms(10), 40.0),
        ("cuLaunchKernel mean latency", ms(10), 5_250.0),
        ("cuLaunchKernel p99 latency", ms(10), 6_087.0),
        ("cuLaunchKernel calls", ms(20), 0.0),
        ("cuLaunchKernel mean latency", ms(20), 0.0),
        ("cuLaunchKernel p99 latency", ms(20), 0.0),
        ("cuMemcpyAsync calls", ms(0), 5.0),
        ("cuMemcpyAsync mean latency", ms(0), 18_000.0),
        ("cuMemcpyAsync p99 latency", ms(0), 19_964.0),
        ("cuMemcpyAsync calls", ms(10), 0.0),
        ("cuMemcpyAsync mean latency", ms(10), 0.0),
        ("cuMemcpyAsync p99 latency", ms(10), 0.0),
    ];
    let mut found = counters(&trace);
    let key = |(n, t, _): &(String, f64, f64)| (t.to_bits(), n.clone());
    found.sort_by_key(key);
    expected.sort_by_key(|(n, t, _)| (t.to_bits(), n.to_string()));
    let expected: Vec<(String, f64, f64)> = expected
        .into_iter()
        .map(|(n, t, v)| (n.to_string(), t, v))
        .collect();
    assert_eq!(found, expected);
    let names: Vec<&Value> = trace["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "M")
        .collect();
    assert_eq!(
        names,
        [
            &json!({"name": "process_name", "ph": "M", "ts": 0, "pid": PID, "tid": PID, "args": {"name": "python3 (pid 4242)"}})
        ]
    );
}

/// Stats mode's rows beside its aggregates: a slow successful launch (25 ms) is a row and in
/// the aggregate, a failed one (719, of an XID's incident) a row and in a failing aggregate.
/// Each counts once; the failed one keeps its marker, incident and slice.
#[test]
fn stats_lake_calls_that_are_rows_and_aggregated_count_once() {
    let dir = tempfile::tempdir().unwrap();
    let lake = dir.path();
    let incident = format!("node-d/0000:3b:00.0/{}", T0 + 16 * S + 500);
    let mut calls = CudaBatchBuilder::new(identity(), 2);
    calls.append(&call(T0 + 15 * S, 25_000_000, (0, "CUDA_SUCCESS")));
    calls.append_linked(
        &call(T0 + 16 * S, 900, (719, "CUDA_ERROR_LAUNCH_FAILED")),
        Some(&incident),
    );
    write(lake, "cuda", "node-d-calls", &calls.finish().unwrap());
    let mut failing = stats(
        T0 + 20 * S,
        "cuLaunchKernel",
        1,
        Some(durations((900, 900, 900), &[(896, 1_024, 1)])),
    );
    (failing.result, failing.result_name) = (719, "CUDA_ERROR_LAUNCH_FAILED".into());
    write_stats(
        lake,
        &[
            // 99 calls of about 4.5 µs and the slow one, in [20971520, 25165824).
            stats(
                T0 + 20 * S,
                "cuLaunchKernel",
                100,
                Some(durations(
                    (4_200, 25_000_000, 99 * 4_500 + 25_000_000),
                    &[(4_096, 5_120, 99), (20_971_520, 25_165_824, 1)],
                )),
            ),
            failing,
        ],
    );
    let mut xid = XidRecord {
        time_ns: T0 + 16 * S + 500,
        code: 13,
        pci_bus_id: "0000:3b:00.0".into(),
        message: "Graphics SM Warp Exception".into(),
        pid: Some(PID),
        comm: Some("python3".into()),
        ..XidRecord::new(XidSource::Kmsg)
    };
    xid.annotations.incident_id = Some(incident.clone());
    xid.annotations.root_candidate = Some(true);
    xid.annotations.affected_pids = vec![PID];
    write(
        lake,
        "xid",
        "node-d-xid",
        &xid_batch_of(&identity(), &[xid]).unwrap(),
    );

    let (code, stderr, html) = view("report", lake);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stderr.contains("1 XIDs in 1 incident(s), 101 CUDA calls (1 failed), 100 of them from cuda_stats, from 3 file(s)"), "{stderr}");
    // 100 aggregated successes (the slow row is one of them) and the failed row. Durations:
    // 900 (the row), 99 in [4096, 5120), 1 in [20971520, 25000001); mean 25,446,400 / 101;
    // p50 (rank 50.5) halfway into the 99: 4,608; p99 (rank 99.99) at their end: 5,119.
    assert_eq!(
        function_row(&html, "cuLaunchKernel"),
        cells(&[
            "cuLaunchKernel",
            "101",
            "0.028",
            "1",
            "252 µs",
            "4.61 µs",
            "5.12 µs",
            "100"
        ])
    );
    let marker = format!("<polygon class=\"cuda-failure\" data-gpu=\"0000:3b:00.0\" data-pid=\"{PID}\" data-function=\"cuLaunchKernel\"");
    assert_eq!(html.matches("<polygon class=\"cuda-failure\"").count(), 1);
    assert_eq!(html.matches(&marker).count(), 1, "{html}");
    let incident_row = format!("<tr class=\"incident\" data-incident=\"{incident}\"");
    let at = html.find(&incident_row).expect("the incident");
    let row = &html[at..at + html[at..].find("</tr>").unwrap()];
    assert!(
        row.ends_with("<td class=\"num\">1</td>"),
        "its failed call: {row}"
    );

    let (code, stderr, json) = view("export-trace", lake);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stderr.contains("(2 CUDA calls, 0 of them entry-only; 1 XIDs; 0 driver operations; 4 names; 6 counter samples from 2 cuda_stats rows) from 3 file(s)"), "{stderr}");
    let trace: Value = serde_json::from_str(&json).unwrap();
    let events = trace["traceEvents"].as_array().unwrap();
    let slices: Vec<&Value> = events.iter().filter(|e| e["ph"] == "X").collect();
    assert_eq!(slices.len(), 2, "both rows stay slices");
    assert_eq!(slices[0]["dur"].as_f64(), Some(25_000.0));
    assert_eq!(slices[1]["args"]["incident_id"], json!(incident));
    assert_eq!(slices[1]["args"]["result"], "CUDA_ERROR_LAUNCH_FAILED");
    // The counters count every call of the interval, failed included: 101 in 10 s; the p99
    // of all three buckets (rank 99.99 at the end of the 99): 5,119.
    assert_eq!(
        counters(&trace)[..3],
        [
            ("cuLaunchKernel calls".to_string(), 0.0, 10.1),
            ("cuLaunchKernel mean latency".to_string(), 0.0, 251_944.0),
            ("cuLaunchKernel p99 latency".to_string(), 0.0, 5_119.0),
        ]
    );
}
