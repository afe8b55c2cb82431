//! `gpuship-lake report` and `export-trace` at the edges of stats mode: an empty `cuda_stats`
//! table, and aggregates with counts at the type's limits and names made to break a page, a
//! terminal or a JSON document.

mod support;

use gpuship_sinks::schema::{CudaBatchBuilder, CudaRow};
use serde_json::Value;
use support::*;

/// A `cuda_stats` table without a row (or without a file): the views are what they were.
#[test]
fn stats_lake_with_an_empty_cuda_stats_table_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let lake = dir.path();
    let mut calls = CudaBatchBuilder::new(identity(), 2);
    calls.append(&CudaRow {
        function: "cuMemAlloc_v2",
        ..call(T0 + S, 500, (0, "CUDA_SUCCESS"))
    });
    calls.append(&CudaRow {
        function: "cuMemAlloc_v2",
        ..call(T0 + 2 * S, 700, (2, "CUDA_ERROR_OUT_OF_MEMORY"))
    });
    write(lake, "cuda", "node-d-calls", &calls.finish().unwrap());
    let expected_row = cells(&[
        "cuMemAlloc_v2",
        "2",
        "0.001",
        "1",
        "600 ns",
        "500 ns",
        "700 ns",
        "—",
    ]);
    for files in [1, 2] {
        let (code, stderr, html) = view("report", lake);
        assert_eq!(code, Some(0), "{stderr}");
        assert!(
            stderr.contains(&format!(
                "2 CUDA calls (1 failed), 0 of them from cuda_stats, from {files} file(s)"
            )),
            "{stderr}"
        );
        assert_eq!(function_row(&html, "cuMemAlloc_v2"), expected_row);
        assert!(!html.contains("id=\"stats-rule\""));
        let (code, stderr, _) = view("export-trace", lake);
        assert_eq!(code, Some(0), "{stderr}");
        assert!(
            stderr.contains(&format!(
                "0 counter samples from 0 cuda_stats rows) from {files} file(s)"
            )),
            "{stderr}"
        );
        write_stats(lake, &[]);
    }
    // Only an empty cuda_stats file: a file was read, so no NO DATA, and no call.
    let only = tempfile::tempdir().unwrap();
    write_stats(only.path(), &[]);
    let (code, stderr, html) = view("report", only.path());
    assert_eq!(code, Some(0), "{stderr}");
    assert!(html.contains("No CUDA call in this range."));
}

/// Counts at the type's limits, an endless interval, and names with markup, quotes, newlines
/// and terminal escapes: no panic, nothing overflows, everything is escaped.
#[test]
fn stats_lake_hostile_aggregates_neither_overflow_nor_inject() {
    let dir = tempfile::tempdir().unwrap();
    let lake = dir.path();
    let function = "cuLaunchKernel<script>\"'\n\u{1b}[2J";
    let mut rows = Vec::new();
    for interval_ns in [10 * S as u64, u64::MAX] {
        let mut row = stats(
            T0 + 20 * S,
            function,
            u64::MAX,
            Some(durations(
                (0, u64::MAX, u64::MAX),
                &[(64, 80, u64::MAX), (412_316_860_416, u64::MAX, u64::MAX)],
            )),
        );
        row.interval_ns = interval_ns;
        row.comm = "evil\"\n\u{1b}]0;pwn\u{7}".into();
        rows.push(row);
    }
    write_stats(lake, &rows);
    let (code, stderr, html) = view("report", lake);
    assert_eq!(code, Some(0), "{stderr}");
    let max = u64::MAX.to_string();
    assert!(
        stderr.contains(&format!(
            "{max} CUDA calls (0 failed), {max} of them from cuda_stats"
        )),
        "{stderr}"
    );
    assert!(!html.contains("<script") && !html.contains('\u{1b}') && !html.contains('\u{7}'));
    let escaped = "cuLaunchKernel&lt;script&gt;&quot;&#39;\n\u{fffd}[2J";
    let row = function_row(&html, escaped);
    assert!(row.starts_with(&cells(&[escaped, &max])), "{row}");

    let (code, stderr, json) = view("export-trace", lake);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(!json.chars().any(|c| c.is_control() && c != '\n'), "{json}");
    assert!(
        json.contains(r#""name":"evil\"\n\u001b]0;pwn\u0007 (pid 4242)""#),
        "{json}"
    );
    assert!(
        json.contains(r#""name":"cuLaunchKernel<script>\"'\n\u001b[2J calls""#),
        "{json}"
    );
    let trace: Value = serde_json::from_str(&json).unwrap();
    // The endless interval is drawn over a day before its end, which is the origin.
    assert_eq!(
        trace["otherData"]["origin_time_ns"],
        T0 + 20 * S - 86_400 * S
    );
}
