//! `gpuship-lake report`, `export-trace` and `query` over lakes holding the flight recorder's
//! rows (`flight_recorder = true`: in stats mode, the calls of a process before an incident,
//! written when it started), written with the sinks' builders: shown beside their incident,
//! counted nowhere; and a lake of files from before the column beside files with it.

mod support;

use gpuship_sinks::arrow_array::RecordBatch as SinksBatch;
use gpuship_sinks::schema::{xid_batch_of, CudaBatchBuilder, CudaRow, XidRecord, XidSource};
use serde_json::{json, Value};
use support::*;

/// The GPU of the XID.
const BUS: &str = "0000:3b:00.0";

/// `row`, a call of `function` instead.
fn of(function: &'static str, row: CudaRow<'static>) -> CudaRow<'static> {
    CudaRow { function, ..row }
}

/// XID 13 at `time_ns` that hit `PID`, root of incident `id`.
fn xid(lake: &std::path::Path, time_ns: i64, id: &str) {
    let mut xid = XidRecord {
        time_ns,
        code: 13,
        pci_bus_id: BUS.into(),
        message: "Graphics SM Warp Exception".into(),
        pid: Some(PID),
        comm: Some("python3".into()),
        ..XidRecord::new(XidSource::Kmsg)
    };
    xid.annotations.incident_id = Some(id.into());
    xid.annotations.root_candidate = Some(true);
    xid.annotations.affected_pids = vec![PID];
    write(
        lake,
        "xid",
        "node-d-xid",
        &xid_batch_of(&identity(), &[xid]).unwrap(),
    );
}

/// The `<tr ...>` that starts with `start`, up to its end.
fn row<'a>(html: &'a str, start: &str) -> &'a str {
    let at = html
        .find(start)
        .unwrap_or_else(|| panic!("no {start}: {html}"));
    &html[at..at + html[at..].find("</tr>").unwrap()]
}

/// Two incidents of `python3` in stats mode: XID 13 (incident A), before which the flight
/// recorder wrote three launches and a copy; and a launch that failed with a sticky error
/// (incident B, no XID), before which it wrote two launches and the failed one's copy. The
/// launches are also 50 aggregated successes and a failing aggregate; the failed launch is a
/// row of its own.
fn two_incidents(lake: &std::path::Path) -> (String, String) {
    let a = format!("node-d/{BUS}/{}", T0 + 16 * S + 500);
    let b = format!("node-d/pid/{PID}/{}", T0 + 25 * S);
    let ok = (0, "CUDA_SUCCESS");
    let sticky = (700, "CUDA_ERROR_ILLEGAL_ADDRESS");
    let failed = call(T0 + 25 * S, 900, sticky);
    let mut calls = CudaBatchBuilder::new(identity(), 8);
    calls.append_linked(&failed, Some(&b));
    for copy in [
        call(T0 + 14 * S, 17_000, ok),
        call(T0 + 15 * S, 18_000, ok),
        of("cuMemcpyAsync", call(T0 + 15 * S + S / 2, 3_000, ok)),
        call(T0 + 16 * S, 19_000, ok),
    ] {
        calls.append_flight_recorded(&copy, &a);
    }
    for copy in [
        call(T0 + 24 * S, 17_500, ok),
        call(T0 + 24 * S + S / 2, 18_500, ok),
        failed,
    ] {
        calls.append_flight_recorded(&copy, &b);
    }
    write(lake, "cuda", "node-d-calls", &calls.finish().unwrap());
    let mut failing = stats(
        T0 + 30 * S,
        "cuLaunchKernel",
        1,
        Some(durations((900, 900, 900), &[(896, 1_024, 1)])),
    );
    (failing.result, failing.result_name) = (sticky.0, sticky.1.into());
    write_stats(
        lake,
        &[
            stats(
                T0 + 20 * S,
                "cuLaunchKernel",
                50,
                Some(durations(
                    (16_400, 20_000, 900_000),
                    &[(16_384, 20_480, 50)],
                )),
            ),
            failing,
        ],
    );
    xid(lake, T0 + 16 * S + 500, &a);
    (a, b)
}

#[test]
fn flight_recorder_rows_show_beside_their_incidents_and_count_nowhere() {
    let dir = tempfile::tempdir().unwrap();
    let lake = dir.path();
    let (a, b) = two_incidents(lake);

    let (code, stderr, html) = view("report", lake);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stderr.contains("gpuship report: 1 XIDs in 1 incident(s), 51 CUDA calls (1 failed), 50 of them from cuda_stats, 7 flight-recorder calls beside them (not counted), from 3 file(s)"), "{stderr}");
    assert!(html.contains("id=\"count-cuda\"><b>51</b>"));
    assert!(html.contains("id=\"count-failures\"><b>1</b>"));
    assert!(html.contains("id=\"count-flight-recorder\"><b>7</b>"));
    assert!(html.contains("id=\"flight-recorder-rule\""));
    // Launches: the 50 aggregated successes and the failed row (900 ns), not the 6 copies.
    // Mean (900,000 + 900) / 51; p50 (rank 25.5) is 24.5 of the 50 into [16400, 20001):
    // 18,164; p99 (rank 50.49) 49.49 into it: 19,964.
    assert_eq!(
        function_row(&html, "cuLaunchKernel"),
        cells(&[
            "cuLaunchKernel",
            "51",
            "0.014",
            "1",
            "17.7 µs",
            "18.2 µs",
            "20.0 µs",
            "50"
        ])
    );
    assert!(
        !html.contains("data-function=\"cuMemcpyAsync\">"),
        "a function only the flight recorder holds is not a row of the table"
    );
    // The XID's incident: no failed call of its own (the copies are not failures).
    let incident = row(
        &html,
        &format!("<tr class=\"incident\" data-incident=\"{a}\""),
    );
    assert!(incident.ends_with("<td class=\"num\">0</td>"), "{incident}");

    // The section: one row per incident and process, oldest first.
    assert_eq!(html.matches("<tr class=\"recorded\"").count(), 2);
    let first = row(
        &html,
        &format!("<tr class=\"recorded\" data-incident=\"{a}\""),
    );
    assert_eq!(
        first,
        format!(
            "<tr class=\"recorded\" data-incident=\"{a}\" data-pid=\"{PID}\" data-calls=\"4\">\
             <td><code>{a}</code></td><td>XID 13 (Graphics/SM engine exception) on {BUS}</td>\
             <td>node-d</td><td class=\"num\">{PID}</td><td>python3</td><td class=\"num\">4</td>\
             <td class=\"num\">0</td><td>2026-11-22 03:00:14.000 UTC</td>\
             <td>2026-11-22 03:00:16.000 UTC</td><td>cuLaunchKernel ×3, cuMemcpyAsync ×1</td>"
        )
    );
    let second = row(
        &html,
        &format!("<tr class=\"recorded\" data-incident=\"{b}\""),
    );
    assert!(second.contains("data-calls=\"3\""), "{second}");
    assert!(second.contains("<td>cuLaunchKernel returned CUDA_ERROR_ILLEGAL_ADDRESS</td>"));
    assert!(second.ends_with(
        "<td class=\"num\">3</td><td class=\"num\">1</td><td>2026-11-22 03:00:24.000 UTC</td>\
         <td>2026-11-22 03:00:25.000 UTC</td><td>cuLaunchKernel ×3</td>"
    ));
    assert!(html.find("id=\"incidents\"") < html.find("id=\"flight-recorder\""));

    // The timeline: both windows on the process's lane of the XID's GPU (B through the
    // process the XID named), beside the one failure marker.
    let window = |id: &str, calls: usize| {
        format!(
            "<rect class=\"flight-recorder\" data-gpu=\"{BUS}\" data-pid=\"{PID}\" \
             data-incident=\"{id}\" data-calls=\"{calls}\""
        )
    };
    assert_eq!(html.matches("<rect class=\"flight-recorder\"").count(), 2);
    assert_eq!(html.matches(&window(&a, 4)).count(), 1, "{html}");
    assert_eq!(html.matches(&window(&b, 3)).count(), 1);
    assert!(html.contains("<title>4 call(s) the flight recorder wrote for incident"));
    assert_eq!(html.matches("<polygon class=\"cuda-failure\"").count(), 1);
    assert!(html.contains("calls the flight recorder wrote before an incident</span>"));

    let (code, stderr, json) = view("export-trace", lake);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stderr.contains("23 events (8 CUDA calls, 0 of them entry-only, 7 of them from the flight recorder; 1 XIDs; 0 driver operations; 5 names; 9 counter samples from 2 cuda_stats rows) from 3 file(s)"), "{stderr}");
    let trace: Value = serde_json::from_str(&json).unwrap();
    let events = trace["traceEvents"].as_array().unwrap();
    let origin = T0 + 10 * S;
    assert_eq!(
        trace["otherData"]["origin_time_ns"], origin,
        "the first interval"
    );
    let track = (1i64 << 29) + i64::from(PID);
    let recorded: Vec<(String, f64, f64, &Value)> = events
        .iter()
        .filter(|e| e["cat"] == "cuda.flight_recorder")
        .map(|e| {
            assert_eq!(
                (&e["ph"], &e["pid"], &e["tid"]),
                (&json!("X"), &json!(PID), &json!(track))
            );
            assert_eq!(e["args"]["flight_recorder"], true);
            (
                e["name"].as_str().unwrap().to_string(),
                e["ts"].as_f64().unwrap(),
                e["dur"].as_f64().unwrap(),
                &e["args"]["incident_id"],
            )
        })
        .collect();
    let at = |s: f64| s * 1e6;
    let (ja, jb) = (json!(a), json!(b));
    let expected = vec![
        ("cuLaunchKernel".to_string(), at(4.0), 17.0, &ja),
        ("cuLaunchKernel".to_string(), at(5.0), 18.0, &ja),
        ("cuMemcpyAsync".to_string(), at(5.5), 3.0, &ja),
        ("cuLaunchKernel".to_string(), at(6.0), 19.0, &ja),
        ("cuLaunchKernel".to_string(), at(14.0), 17.5, &jb),
        ("cuLaunchKernel".to_string(), at(14.5), 18.5, &jb),
        ("cuLaunchKernel".to_string(), at(15.0), 0.9, &jb),
    ];
    assert_eq!(recorded, expected);
    let ordinary: Vec<&Value> = events.iter().filter(|e| e["cat"] == "cuda").collect();
    assert_eq!(ordinary.len(), 1);
    assert_eq!(
        (&ordinary[0]["tid"], &ordinary[0]["args"]["incident_id"]),
        (&json!(PID), &jb)
    );
    assert!(events.iter().any(|e| e["name"] == "thread_name"
        && e["tid"] == track
        && e["args"]["name"] == format!("python3 (tid {PID}) flight recorder")));
}

/// `batch` as a file written before schema version 4: without the `flight_recorder` column
/// and saying version 3.
fn before_the_column(batch: &SinksBatch) -> SinksBatch {
    let schema = batch.schema();
    let keep: Vec<usize> = (0..schema.fields().len())
        .filter(|&i| schema.field(i).name() != "flight_recorder")
        .collect();
    let batch = batch.project(&keep).unwrap();
    let mut metadata = batch.schema().metadata().clone();
    metadata.insert(String::from("gpuship.schema_version"), String::from("3"));
    let schema = std::sync::Arc::new(batch.schema().as_ref().clone().with_metadata(metadata));
    SinksBatch::try_new(schema, batch.columns().to_vec()).unwrap()
}

/// An hour's lake of files from an agent before the column (allocations, one failed) and
/// after it (launches, one failed with a sticky error, and the flight recorder's copies): the
/// views read both, the old rows as ordinary calls.
#[test]
fn files_before_the_column_read_beside_files_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let lake = dir.path();
    let mut old = CudaBatchBuilder::new(identity(), 2);
    let alloc = |t, d, r| of("cuMemAlloc_v2", call(t, d, r));
    old.append(&alloc(T0 + S, 500, (0, "CUDA_SUCCESS")));
    old.append(&alloc(T0 + 2 * S, 700, (2, "CUDA_ERROR_OUT_OF_MEMORY")));
    let old = before_the_column(&old.finish().unwrap());
    assert!(old.column_by_name("flight_recorder").is_none());
    write(lake, "cuda", "node-d-old", &old);
    let incident = format!("node-d/pid/{PID}/{}", T0 + 10 * S);
    let failed = call(T0 + 10 * S, 1_000, (700, "CUDA_ERROR_ILLEGAL_ADDRESS"));
    let mut new = CudaBatchBuilder::new(identity(), 4);
    new.append(&call(T0 + 8 * S, 2_000, (0, "CUDA_SUCCESS")));
    new.append_linked(&failed, Some(&incident));
    new.append_flight_recorded(&call(T0 + 8 * S, 2_000, (0, "CUDA_SUCCESS")), &incident);
    new.append_flight_recorded(&failed, &incident);
    write(lake, "cuda", "node-d-new", &new.finish().unwrap());

    // Old and new rows, each call once: 2 allocations, 2 launches.
    let (code, stderr, html) = view("report", lake);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stderr.contains("0 XIDs in 0 incident(s), 4 CUDA calls (2 failed), 0 of them from cuda_stats, 2 flight-recorder calls beside them (not counted), from 2 file(s)"), "{stderr}");
    assert_eq!(
        function_row(&html, "cuMemAlloc_v2"),
        cells(&[
            "cuMemAlloc_v2",
            "2",
            "0.001",
            "1",
            "600 ns",
            "500 ns",
            "700 ns",
            "—"
        ])
    );
    assert_eq!(
        function_row(&html, "cuLaunchKernel"),
        cells(&[
            "cuLaunchKernel",
            "2",
            "0.001",
            "1",
            "1.50 µs",
            "1.00 µs",
            "2.00 µs",
            "—"
        ])
    );
    let window = row(&html, "<tr class=\"recorded\"");
    assert!(
        window.contains(&format!(
            "data-incident=\"{incident}\" data-pid=\"{PID}\" data-calls=\"2\""
        )),
        "{window}"
    );
    assert!(window.contains("<td>cuLaunchKernel returned CUDA_ERROR_ILLEGAL_ADDRESS</td>"));
    // No XID: the failures and the window on lanes of their own.
    assert!(html.contains("CUDA failures and flight-recorder calls no XID links to a GPU"));
    assert_eq!(html.matches("<polygon class=\"cuda-failure\"").count(), 2);
    assert_eq!(
        html.matches("<rect class=\"flight-recorder\" data-gpu=\"\"")
            .count(),
        1
    );

    let (code, stderr, _) = view("export-trace", lake);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains(
            "(6 CUDA calls, 0 of them entry-only, 2 of them from the flight recorder; 0 XIDs;"
        ),
        "{stderr}"
    );

    // In SQL the old rows' column is null (left out of a JSON row), the new rows' false or
    // true.
    let (code, stderr, rows) = query(
        "SELECT flight_recorder, count(*) AS calls FROM cuda GROUP BY flight_recorder \
         ORDER BY flight_recorder NULLS FIRST",
        lake,
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        rows,
        json!([
            {"calls": 2},
            {"flight_recorder": false, "calls": 2},
            {"flight_recorder": true, "calls": 2}
        ])
    );
}
