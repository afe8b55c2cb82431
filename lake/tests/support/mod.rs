//! Lakes of stats mode for the views' tests, written with the sinks' own batch builders (the
//! agent's exact columns) and read back through the `gpuship-lake` binary; each test file uses
//! some of these.
#![allow(dead_code)]

use std::path::Path;
use std::process::Command;

use gpuship_sinks::arrow_array::RecordBatch as SinksBatch;
use gpuship_sinks::schema::{
    CudaRow, CudaStatsBatchBuilder, CudaStatsRow, DurationBucket, DurationStats, HostIdentity,
};
use parquet::arrow::ArrowWriter;
use serde_json::Value;

/// 2026-11-22T03:00:00Z, the start of every range here.
pub const T0: i64 = 1_795_316_400_000_000_000;
/// A second, in nanoseconds.
pub const S: i64 = 1_000_000_000;
/// The process of every row.
pub const PID: i32 = 4242;

/// Host `node-d`.
pub fn identity() -> HostIdentity {
    HostIdentity {
        host: "node-d".into(),
        boot_id: "boot".into(),
    }
}

/// Writes `batch` (the sinks' arrow) as `<kind>/dt=2026-11-22/hour=03/part-<name>.parquet`.
pub fn write(lake: &Path, kind: &str, name: &str, batch: &SinksBatch) {
    let mut bytes = Vec::new();
    gpuship_sinks::encode::arrow_ipc::write_stream(batch, &mut bytes).unwrap();
    let mut reader = arrow_ipc::reader::StreamReader::try_new(bytes.as_slice(), None).unwrap();
    let schema = reader.schema();
    let batch = match reader.next() {
        Some(batch) => batch.unwrap(),
        None => arrow_array::RecordBatch::new_empty(schema),
    };
    let folder = lake.join(kind).join("dt=2026-11-22/hour=03");
    std::fs::create_dir_all(&folder).unwrap();
    let file = std::fs::File::create(folder.join(format!("part-{name}.parquet"))).unwrap();
    let mut writer = ArrowWriter::try_new(file, batch.schema(), None).unwrap();
    writer.write(&batch).unwrap();
    writer.close().unwrap();
}

/// A row of `calls` successful calls of `python3` in the 10 s ending at `end`.
pub fn stats(
    end: i64,
    function: &str,
    calls: u64,
    durations: Option<DurationStats>,
) -> CudaStatsRow {
    CudaStatsRow {
        time_ns: end,
        interval_ns: 10 * S as u64,
        pid: PID,
        comm: "python3".into(),
        function: function.into(),
        result: 0,
        result_name: "CUDA_SUCCESS".into(),
        calls,
        bytes_sum: None,
        durations,
        workload: None,
        observed_fraction: 1.0,
    }
}

/// Durations with exact `(min, max, sum)` and `(from, to, calls)` buckets.
pub fn durations(
    (min_ns, max_ns, sum_ns): (u64, u64, u64),
    buckets: &[(u64, u64, u64)],
) -> DurationStats {
    DurationStats {
        sum_ns,
        min_ns,
        max_ns,
        p50_ns: 0,
        p99_ns: 0,
        buckets: buckets
            .iter()
            .map(|&(from_ns, to_ns, calls)| DurationBucket {
                from_ns,
                to_ns,
                calls,
            })
            .collect(),
    }
}

/// `rows` as the lake's one `cuda_stats` file.
pub fn write_stats(lake: &Path, rows: &[CudaStatsRow]) {
    let mut builder = CudaStatsBatchBuilder::new(identity());
    for row in rows {
        builder.append(row.clone());
    }
    write(
        lake,
        "cuda_stats",
        "node-d-stats",
        &builder.finish().unwrap(),
    );
}

/// A launch by the main thread of `python3` at `time_ns` that returned `result` (code, name).
pub fn call(time_ns: i64, duration_ns: u64, result: (u32, &'static str)) -> CudaRow<'static> {
    CudaRow {
        time_ns,
        pid: PID,
        tid: PID,
        comm: "python3",
        function: "cuLaunchKernel",
        duration_ns,
        result: result.0,
        result_name: result.1,
        bytes: None,
        device_ptr: None,
        stream: Some(0x5000),
        launch: None,
        workload: None,
        objects: Default::default(),
    }
}

/// Runs `gpuship-lake <view> --since T0 --until T0+1h --data lake --output out`: (exit status,
/// stderr, output).
pub fn view(view: &str, lake: &Path) -> (Option<i32>, String, String) {
    let out = lake.join(format!("{view}.out"));
    let output = Command::new(env!("CARGO_BIN_EXE_gpuship-lake"))
        .args([
            view,
            "--since",
            "2026-11-22T03:00:00Z",
            "--until",
            "2026-11-22T04:00:00Z",
        ])
        .arg("--data")
        .arg(lake)
        .arg("--output")
        .arg(&out)
        .env_remove("RUST_LOG")
        .output()
        .expect("gpuship-lake runs");
    let written = std::fs::read_to_string(&out).unwrap_or_default();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    (output.status.code(), stderr, written)
}

/// Runs `gpuship-lake query SQL --format json` over the same hour: (exit status, stderr, the
/// rows as a JSON array).
pub fn query(sql: &str, lake: &Path) -> (Option<i32>, String, Value) {
    let output = Command::new(env!("CARGO_BIN_EXE_gpuship-lake"))
        .args([
            "query",
            sql,
            "--since",
            "2026-11-22T03:00:00Z",
            "--until",
            "2026-11-22T04:00:00Z",
            "--format",
            "json",
        ])
        .arg("--data")
        .arg(lake)
        .env_remove("RUST_LOG")
        .output()
        .expect("gpuship-lake runs");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let rows = serde_json::from_slice(&output.stdout).unwrap_or(Value::Null);
    (output.status.code(), stderr, rows)
}

/// The `<tr class="function" ...>` row of `function`, cells only.
pub fn function_row(html: &str, function: &str) -> String {
    let start = format!("<tr class=\"function\" data-function=\"{function}\">");
    let at = html
        .find(&start)
        .unwrap_or_else(|| panic!("no row {function}: {html}"));
    let end = at + html[at..].find("</tr>").unwrap();
    html[at + start.len()..end].to_string()
}

/// `values` as the cells of a function row (the first a name, the others numbers).
pub fn cells(values: &[&str]) -> String {
    values
        .iter()
        .enumerate()
        .map(|(i, v)| match i {
            0 => format!("<td>{v}</td>"),
            _ => format!("<td class=\"num\">{v}</td>"),
        })
        .collect()
}

/// The trace's `C` events as (name, ts in µs after the origin, the one value).
pub fn counters(trace: &Value) -> Vec<(String, f64, f64)> {
    trace["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "C")
        .map(|e| {
            let args = e["args"].as_object().unwrap();
            assert_eq!(args.len(), 1, "{e}");
            let value = args.values().next().unwrap().as_f64().unwrap();
            (
                e["name"].as_str().unwrap().to_string(),
                e["ts"].as_f64().unwrap(),
                value,
            )
        })
        .collect()
}
