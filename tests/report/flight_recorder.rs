//! docs/rca.md's queries over the flight recorder's rows, run in DuckDB as written, on a lake
//! made with the agent's own batch builders: a `cuda` file from before the `flight_recorder`
//! column (schema version 3) beside one with it, and stats mode's aggregates. Section 11 gives
//! exactly one incident's copies, in order; section 10 counts none of them. (The report and the
//! trace of such lakes: `lake/tests/flight_recorder_views.rs`.)

use std::path::Path;

use arrow_array::RecordBatch;
use gpuship_sinks::schema::{CudaBatchBuilder, CudaRow, CudaStatsBatchBuilder, CudaStatsRow};
use gpuship_sinks::test_support::{cuda_row, host_identity};
use parquet::arrow::ArrowWriter;

use crate::support::lake::{duckdb, rca_query};

/// 2026-11-22T03:00:00Z, and a second.
const T0: i64 = 1_795_316_400_000_000_000;
const S: i64 = 1_000_000_000;
/// The incident id docs/rca.md's query names, replaced by the test's.
const DOC_INCIDENT: &str = "node-7/0000:3b:00.0/1795316416000000500";

fn write(lake: &Path, kind: &str, name: &str, batch: &RecordBatch) {
    let folder = lake.join(kind).join("dt=2026-11-22/hour=03");
    std::fs::create_dir_all(&folder).unwrap();
    let file = std::fs::File::create(folder.join(format!("part-{name}.parquet"))).unwrap();
    let mut writer = ArrowWriter::try_new(file, batch.schema(), None).unwrap();
    writer.write(batch).unwrap();
    writer.close().unwrap();
}

/// A call of pid 77 (`train`) on `tid`.
fn call(time_ns: i64, tid: i32, function: &'static str, result: u32) -> CudaRow<'static> {
    CudaRow {
        time_ns,
        pid: 77,
        tid,
        comm: "train",
        function,
        duration_ns: 1_000 + (time_ns / S % 100) as u64,
        result,
        result_name: match result {
            0 => "CUDA_SUCCESS",
            2 => "CUDA_ERROR_OUT_OF_MEMORY",
            _ => "CUDA_ERROR_ILLEGAL_ADDRESS",
        },
        stream: Some(0x5000),
        ..cuda_row()
    }
}

fn stats(function: &str, calls: u64, result: u32) -> CudaStatsRow {
    CudaStatsRow {
        time_ns: T0 + 20 * S,
        interval_ns: 10 * S as u64,
        pid: 77,
        comm: "train".into(),
        function: function.into(),
        result,
        result_name: if result == 0 {
            "CUDA_SUCCESS"
        } else {
            "CUDA_ERROR_ILLEGAL_ADDRESS"
        }
        .into(),
        calls,
        bytes_sum: None,
        durations: None,
        workload: None,
        observed_fraction: 1.0,
    }
}

#[test]
fn rca_queries_read_the_flight_recorder_beside_files_without_it() {
    let dir = tempfile::tempdir().unwrap();
    let lake = dir.path();
    let identity = host_identity("node-7", "boot");
    let incident = format!("node-7/pid/77/{}", T0 + 15 * S);

    // Before the column: two allocations, one failed.
    let mut old = CudaBatchBuilder::new(identity.clone(), 2);
    old.append(&call(T0 + S, 77, "cuMemAlloc_v2", 0));
    old.append(&call(T0 + 2 * S, 77, "cuMemAlloc_v2", 2));
    let old = old.finish().unwrap();
    // A schema-version-3 file: everything from `flight_recorder` on is missing.
    let marker = old.schema().index_of("flight_recorder").unwrap();
    let keep: Vec<usize> = (0..marker).collect();
    let old = old.project(&keep).unwrap();
    assert!(old.column_by_name("flight_recorder").is_none());
    write(lake, "cuda", "node-7-old", &old);

    // After it: a launch fails with a sticky error; the flight recorder writes the calls of the
    // two threads before it and the failure's copy, and one call of another incident.
    let failed = call(T0 + 15 * S, 77, "cuLaunchKernel", 700);
    let mut new = CudaBatchBuilder::new(identity.clone(), 6);
    new.append_linked(&failed, Some(&incident));
    for copy in [
        call(T0 + 13 * S, 77, "cuLaunchKernel", 0),
        CudaRow {
            bytes: Some(4096),
            device_ptr: Some(0x7f00),
            ..call(T0 + 14 * S, 78, "cuMemcpyAsync", 0)
        },
        call(T0 + 14 * S + S / 2, 77, "cuLaunchKernel", 0),
        failed,
    ] {
        new.append_flight_recorded(&copy, &incident);
    }
    new.append_flight_recorded(
        &call(T0 + 30 * S, 77, "cuLaunchKernel", 0),
        "node-7/0000:3b:00.0/1",
    );
    write(lake, "cuda", "node-7-new", &new.finish().unwrap());
    let mut aggregates = CudaStatsBatchBuilder::new(identity);
    aggregates.append(stats("cuLaunchKernel", 10, 0));
    aggregates.append(stats("cuLaunchKernel", 1, 700));
    write(
        lake,
        "cuda_stats",
        "node-7-stats",
        &aggregates.finish().unwrap(),
    );

    let location = lake.display().to_string();
    let sql =
        rca_query("flight_recorder", "gpuship-data", &location).replace(DOC_INCIDENT, &incident);
    assert!(sql.contains(&incident), "{sql}");
    let copies: Vec<Vec<String>> = duckdb(&sql)
        .into_iter()
        .map(|row| row[1..].to_vec())
        .collect();
    let row = |cells: &[&str]| -> Vec<String> { cells.iter().map(|c| c.to_string()).collect() };
    let stream = (0x5000).to_string();
    assert_eq!(
        copies,
        [
            row(&[
                "77",
                "77",
                "cuLaunchKernel",
                "CUDA_SUCCESS",
                "1013",
                "NULL",
                "NULL",
                &stream,
                "NULL",
                "NULL"
            ]),
            row(&[
                "77",
                "78",
                "cuMemcpyAsync",
                "CUDA_SUCCESS",
                "1014",
                "4096",
                &0x7f00.to_string(),
                &stream,
                "NULL",
                "NULL"
            ]),
            row(&[
                "77",
                "77",
                "cuLaunchKernel",
                "CUDA_SUCCESS",
                "1014",
                "NULL",
                "NULL",
                &stream,
                "NULL",
                "NULL"
            ]),
            row(&[
                "77",
                "77",
                "cuLaunchKernel",
                "CUDA_ERROR_ILLEGAL_ADDRESS",
                "1015",
                "NULL",
                "NULL",
                &stream,
                "NULL",
                "NULL"
            ]),
        ]
    );

    // Section 10: launches are the 10 aggregated successes and the failed row; the copies, of
    // the failure too, count nowhere, and cuMemcpyAsync, which only the flight recorder holds,
    // is not a function of the answer. The old file's allocations are rows (null is not true).
    let counted = duckdb(&rca_query("stats_calls", "gpuship-data", &location));
    assert_eq!(
        counted,
        [
            row(&["cuLaunchKernel", "11", "1", "10"]),
            row(&["cuMemAlloc_v2", "2", "1", "0"]),
        ]
    );
}
