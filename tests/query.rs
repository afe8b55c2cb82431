//! `gpuship query "SQL"` over a lake written by the Parquet sink's own writer: exact rows and
//! values in every output format, the time range and the hive partition columns, and the
//! outcomes that are not rows (wrong SQL: exit status 2; no data: exit status 3).

use std::path::Path;
use std::process::{Command, Output};

use gpuship_sinks::parquet::{FileOutcome, ParquetSinkConfig, PartitionedFiles};
use gpuship_sinks::schema::{
    CudaBatchBuilder, CudaRow, DriverBatchBuilder, DriverRow, HostIdentity, XidBatchBuilder,
    XidRecord, XidSource,
};
use gpuship_sinks::test_support::host_identity;
use gpuship_sinks::EventKind;

const NO_DATA: i32 = 3;
const SQL_ERROR: i32 = 2;

fn identity(host: &str) -> HostIdentity {
    host_identity(host, "boot")
}

fn call(time_ns: i64, function: &'static str, result: u32) -> CudaRow<'static> {
    CudaRow {
        time_ns,
        pid: 100,
        tid: 101,
        comm: "train",
        function,
        duration_ns: 1_000,
        result,
        result_name: if result == 0 {
            "CUDA_SUCCESS"
        } else {
            "CUDA_ERROR_ILLEGAL_ADDRESS"
        },
        bytes: None,
        device_ptr: None,
        stream: None,
        launch: None,
        workload: None,
        objects: Default::default(),
    }
}

/// Writes the rows of one host with the sink's writer; returns how many files it finalized.
fn write_host(root: &Path, host: &str, now_ns: i64) -> usize {
    let minute = 60_000_000_000i64;
    let mut files = PartitionedFiles::new(ParquetSinkConfig::with_path(root), host);
    let mut cuda = CudaBatchBuilder::new(identity(host), 4);
    for row in [
        call(now_ns - 10 * minute, "cuMemAlloc_v2", 0),
        call(now_ns - 9 * minute, "cuMemAlloc_v2", 2),
        call(now_ns - 8 * minute, "cuLaunchKernel", 0),
        // Three hours back: outside `--since 1h`.
        call(now_ns - 180 * minute, "cuCtxSynchronize", 0),
    ] {
        cuda.append(&row);
    }
    files.write(EventKind::Cuda, &cuda.finish().expect("a cuda batch"));
    let mut xid = XidBatchBuilder::new(identity(host));
    xid.append(&XidRecord {
        time_ns: now_ns - 5 * minute,
        code: 79,
        pci_bus_id: "0000:3b:00.0".into(),
        message: "GPU has fallen off the bus.".into(),
        pid: Some(100),
        ..XidRecord::new(XidSource::Kmsg)
    });
    files.write(EventKind::Xid, &xid.finish().expect("an xid batch"));
    let mut driver = DriverBatchBuilder::new(identity(host));
    driver.append(DriverRow {
        time_ns: now_ns - 7 * minute,
        pid: 100,
        tid: 101,
        comm: "train".into(),
        hook: "ioctl".into(),
        device: Some("nvidiactl".into()),
        major: Some(195),
        minor: Some(255),
        fd: Some(3),
        request: Some(0xc020_462a),
        request_dir: Some("read_write"),
        request_type: Some(0x46),
        request_nr: Some(0x2a),
        request_size: Some(32),
        request_name: None,
        duration_ns: 2_500,
        result: Some(0),
        workload: None,
    });
    files.write(EventKind::Driver, &driver.finish().expect("a driver batch"));
    let outcomes = files.close_all();
    for outcome in &outcomes {
        assert!(
            matches!(outcome, FileOutcome::Finalized { .. }),
            "{outcome:?}"
        );
    }
    outcomes.len()
}

fn lake() -> (tempfile::TempDir, i64) {
    let dir = tempfile::tempdir().expect("a temp dir");
    let now_ns = chrono::Utc::now()
        .timestamp_nanos_opt()
        .expect("a time in range");
    assert!(write_host(dir.path(), "node-a", now_ns) >= 3);
    assert!(write_host(dir.path(), "node-b", now_ns) >= 3);
    (dir, now_ns)
}

fn query(data: &Path, sql: &str, extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gpuship"))
        .args(["query", sql, "--since", "1h", "--data"])
        .arg(data)
        .args(extra)
        .output()
        .expect("gpuship runs")
}

fn stdout(output: &Output) -> String {
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout.clone()).expect("UTF-8 output")
}

#[test]
fn counts_come_back_exactly_in_csv_for_the_range_only() {
    let (dir, _) = lake();
    let out = query(
        dir.path(),
        "SELECT host, function, count(*) AS calls, sum(CASE WHEN result <> 0 THEN 1 ELSE 0 END) AS failed \
         FROM cuda GROUP BY host, function ORDER BY host, function",
        &["--format", "csv"],
    );
    assert_eq!(
        stdout(&out),
        "host,function,calls,failed\n\
         node-a,cuLaunchKernel,1,0\n\
         node-a,cuMemAlloc_v2,2,1\n\
         node-b,cuLaunchKernel,1,0\n\
         node-b,cuMemAlloc_v2,2,1\n",
        "the call three hours back is outside --since 1h"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("4 row(s) from"), "{stderr}");
}

#[test]
fn rows_come_back_as_json_with_their_values_and_partitions() {
    let (dir, now_ns) = lake();
    let out = query(
        dir.path(),
        "SELECT host, code, pci_bus_id, message, time_ns, dt, hour FROM xid ORDER BY host",
        &["--format", "json"],
    );
    let rows: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("a JSON array");
    let at = chrono::DateTime::from_timestamp_nanos(now_ns - 5 * 60_000_000_000);
    let expected: Vec<serde_json::Value> = ["node-a", "node-b"]
        .iter()
        .map(|host| {
            serde_json::json!({
                "host": host,
                "code": 79,
                "pci_bus_id": "0000:3b:00.0",
                "message": "GPU has fallen off the bus.",
                "time_ns": now_ns - 5 * 60_000_000_000,
                "dt": at.format("%Y-%m-%d").to_string(),
                "hour": at.format("%H").to_string(),
            })
        })
        .collect();
    assert_eq!(rows, serde_json::Value::Array(expected));
}

#[test]
fn the_default_output_is_a_table_and_tables_join() {
    let (dir, _) = lake();
    let out = query(
        dir.path(),
        "SELECT d.host, count(*) AS ops, min(x.code) AS xid \
         FROM driver d JOIN xid x ON d.host = x.host AND d.pid = x.pid \
         GROUP BY d.host ORDER BY d.host",
        &[],
    );
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines,
        [
            "+--------+-----+-----+",
            "| host   | ops | xid |",
            "+--------+-----+-----+",
            "| node-a | 1   | 79  |",
            "| node-b | 1   | 79  |",
            "+--------+-----+-----+",
        ],
        "{text}"
    );
}

#[test]
fn wrong_sql_is_exit_status_2_with_the_reason() {
    let (dir, _) = lake();
    for (sql, named) in [
        ("SELECT no_such_column FROM cuda", "no_such_column"),
        ("SELECT * FROM no_such_table", "no_such_table"),
        ("SELEKT 1", "SELEKT"),
        // A query only reads: nothing is written, nothing about the session changes.
        (
            "COPY (SELECT 1) TO '/tmp/gpuship-query-copy.csv'",
            "not supported: COPY",
        ),
        ("CREATE TABLE t AS SELECT 1", "DDL not supported"),
        ("SET datafusion.execution.batch_size = 1", "not supported"),
    ] {
        let out = query(dir.path(), sql, &[]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(SQL_ERROR), "{sql}: {stderr}");
        assert!(
            stderr.contains("gpuship query: SQL error") && stderr.contains(named),
            "{sql}: {stderr}"
        );
        assert!(out.stdout.is_empty(), "{sql}");
    }
    assert!(!std::path::Path::new("/tmp/gpuship-query-copy.csv").exists());
}

#[test]
fn an_empty_lake_is_no_data_not_an_empty_answer() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let out = query(dir.path(), "SELECT count(*) FROM cuda", &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(NO_DATA), "{stderr}");
    assert!(stderr.contains("gpuship query: NO DATA"), "{stderr}");
}
