//! The flight recorder on real eBPF: in stats mode the stand-in workload's launches become no
//! rows, until an incident starts for the process; then its calls of the seconds before are
//! written as `cuda` rows marked `flight_recorder`, carrying the incident's id, once per
//! incident. Nothing is written while no incident happens.

use std::time::Duration;

use crate::support;
use crate::support::agent::{data_dir, Agent};
use crate::support::cuda_stats::{stats_config, stats_config_fleet_default};
use crate::support::lake::{duckdb, rca_query};
use crate::support::{kmsg, wait_until, Fixtures};

/// `(function, result, incident_id, flight_recorder)` of the process's rows, in call order.
fn cuda_rows(data: &std::path::Path, pid: u32) -> Vec<Vec<String>> {
    duckdb(&format!(
        "select function, result, coalesce(incident_id, '-'), flight_recorder \
         from read_parquet('{}/cuda/**/*.parquet', hive_partitioning = true, union_by_name = true) \
         where pid = {pid} order by time_ns, tid",
        data.display()
    ))
}

#[test]
fn a_sticky_failure_writes_the_calls_before_it_once_under_its_incident() {
    let _alone = support::exclusive();
    let fixtures = Fixtures::build();
    let data = data_dir();
    let config = stats_config(&fixtures, data.path(), "stats_interval_secs = 1\n");
    let agent = Agent::start(&config, &[]);
    let (pid, stdout) = fixtures.run_workload(
        &["sequence", "3"],
        &[("FAKE_CUDA_RESULTS", "cuCtxSynchronize=700")],
    );
    assert_eq!(stdout.trim(), "workload: sequence iterations=3 calls=90");
    let stopped = agent.stop();
    assert!(stopped.status.success(), "{}", stopped.log);
    assert_eq!(
        stopped.ring("cuda")["flight_recorded"],
        4,
        "{}",
        stopped.outcome
    );

    let rows = cuda_rows(data.path(), pid);
    let incident = rows
        .iter()
        .find(|r| r[0] == "cuCtxSynchronize")
        .map(|r| r[2].clone())
        .expect("the failed sync");
    assert!(incident.contains(&format!("/pid-{pid}/")), "{incident}");
    // Before the first sticky failure, the stats functions' successful calls of iteration 1
    // (one allocation, three launches) come back from the recorder, in call order.
    let recorded: Vec<(&str, &str, &str)> = rows
        .iter()
        .filter(|r| r[3] == "True")
        .map(|r| (r[0].as_str(), r[1].as_str(), r[2].as_str()))
        .collect();
    assert_eq!(
        recorded,
        vec![
            ("cuMemAlloc_v2", "0", incident.as_str()),
            ("cuLaunchKernel", "0", incident.as_str()),
            ("cuLaunchKernelEx", "0", incident.as_str()),
            ("cuLaunchKernel_ptsz", "0", incident.as_str()),
        ],
        "{rows:?}"
    );
    // Every sticky failure of the broken process joins the one incident; the other rows are
    // ordinary (not recorder) rows.
    let failed_syncs: Vec<&str> = rows
        .iter()
        .filter(|r| r[0] == "cuCtxSynchronize")
        .map(|r| r[2].as_str())
        .collect();
    assert_eq!(failed_syncs, vec![incident.as_str(); 3]);
    assert!(rows
        .iter()
        .filter(|r| r[3] != "True")
        .all(|r| r[3] == "False"));
    assert!(stopped
        .log
        .contains("flight recorder: the process's calls before the incident written"));
}

#[test]
fn an_xid_naming_a_process_writes_its_launches_and_nothing_is_written_without_one() {
    let _alone = support::exclusive();
    let fixtures = Fixtures::build();
    let data = data_dir();
    let config = stats_config(&fixtures, data.path(), "stats_interval_secs = 1\n")
        .replace("kmsg = false", "kmsg = true");
    let agent = Agent::start(&config, &[]);
    let (quiet, _) = fixtures.run_workload(&["launches", "500"], &[]);
    let (pid, stdout) = fixtures.run_workload(&["launches", "1000"], &[]);
    assert_eq!(stdout.trim(), "workload: launches calls=1000");
    kmsg(&format!(
        "<4>NVRM: Xid (PCI:0000:00:06): 31, pid={pid}, name=cuda_workload, channel 0x0000000a, \
         intr 00000000. MMU Fault: ENGINE GRAPHICS GPC1 GPCCLIENT_T1_8 faulted @ 0x7f00_00000000. \
         Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_WRITE"
    ));
    wait_until(
        Duration::from_secs(10),
        "the recorder's rows are written",
        || agent.log().contains("flight recorder: the process's calls"),
        || agent.log(),
    );
    let stopped = agent.stop();
    assert!(stopped.status.success(), "{}", stopped.log);
    assert_eq!(
        stopped.ring("cuda")["flight_recorded"],
        1000,
        "{}",
        stopped.outcome
    );
    let rows = cuda_rows(data.path(), pid);
    assert_eq!(rows.len(), 1000, "{:?}", &rows[..rows.len().min(5)]);
    let incident = &rows[0][2];
    assert!(
        incident.contains("/0000:00:06.0/"),
        "the XID's incident: {incident}"
    );
    assert!(rows
        .iter()
        .all(|r| r[0] == "cuLaunchKernel" && r[1] == "0" && &r[2] == incident && r[3] == "True"));
    // The process no XID named: its launches stay statistics only.
    assert!(cuda_rows(data.path(), quiet).is_empty());
    // docs/rca.md's query for the calls before an incident, on this lake.
    let query = rca_query(
        "flight_recorder",
        "gpuship-data",
        &data.path().display().to_string(),
    )
    .replace("node-7/0000:3b:00.0/1795316416000000500", incident);
    let before = duckdb(&query);
    assert_eq!(before.len(), 1000, "{query}");
    assert!(before
        .iter()
        .all(|r| r[3] == "cuLaunchKernel" && r[4] == "CUDA_SUCCESS"));
}

/// `(function, result name, flight_recorder, grid x/y/z, block x/y/z, shared memory, stream,
/// comm)`
/// of the process's launch rows, in call order; nulls as "null".
fn launch_rows(data: &std::path::Path, pid: u32) -> Vec<String> {
    let columns = [
        "function",
        "result_name",
        "flight_recorder",
        "grid_x",
        "grid_y",
        "grid_z",
        "block_x",
        "block_y",
        "block_z",
        "shared_mem_bytes",
        "stream",
        "comm",
    ]
    .map(|c| format!("coalesce(cast({c} as varchar), 'null')"))
    .join(", ");
    duckdb(&format!(
        "select {columns} from read_parquet('{}/cuda/**/*.parquet', hive_partitioning = true, \
         union_by_name = true) where pid = {pid} and function like 'cuLaunchKernel%' \
         order by time_ns, tid",
        data.display()
    ))
    .into_iter()
    .map(|row| row.join(" "))
    .collect()
}

/// Runs one `sequence` iteration whose sync fails with a sticky error and whose Ex and _ptsz
/// launches fail with CUDA_ERROR_INVALID_VALUE, in stats mode; returns its launch rows.
fn recorded_and_failed_launches(launch_details: bool) -> Vec<String> {
    let fixtures = Fixtures::build();
    let data = data_dir();
    let config = stats_config(
        &fixtures,
        data.path(),
        &format!("flight_recorder_launch_details = {launch_details}\n"),
    );
    let agent = Agent::start(&config, &[]);
    let (pid, _) = fixtures.run_workload(
        &["sequence", "1"],
        &[(
            "FAKE_CUDA_RESULTS",
            "cuCtxSynchronize=700,cuLaunchKernelEx=1,cuLaunchKernel_ptsz=1",
        )],
    );
    let stopped = agent.stop();
    assert!(stopped.status.success(), "{}", stopped.log);
    launch_rows(data.path(), pid)
}

/// In stats mode a launch's entry reads registers only. A launch that becomes a row (here a
/// failed one) gets its stack-passed arguments (cuLaunchKernel_ptsz) and its CUlaunchConfig
/// (cuLaunchKernelEx) read when it returns, so the row is as complete as in rows mode; a
/// recorded launch has grid and block x/y, and nulls (never zeros) for the rest, unless
/// `flight_recorder_launch_details` is on. Every row names its thread.
#[test]
fn recorded_launches_keep_their_register_arguments_and_failed_ones_have_all() {
    let _alone = support::exclusive();
    let failed = [
        "cuLaunchKernelEx CUDA_ERROR_INVALID_VALUE false 64 4 2 128 2 1 2048 20480 cuda_workload",
        "cuLaunchKernel_ptsz CUDA_ERROR_INVALID_VALUE false 7 1 1 32 1 1 0 20480 cuda_workload",
    ];
    let mut lean =
        vec!["cuLaunchKernel CUDA_SUCCESS true 120 2 1 256 1 null null null cuda_workload"];
    lean.extend(failed);
    assert_eq!(recorded_and_failed_launches(false), lean);
    let mut detailed =
        vec!["cuLaunchKernel CUDA_SUCCESS true 120 2 1 256 1 1 1024 20480 cuda_workload"];
    detailed.extend(failed);
    assert_eq!(recorded_and_failed_launches(true), detailed);
}

/// The fleet default (`stats_entry_only = ["cuLaunchKernel*"]`): launches in stats mode have no
/// return probe. They are counted per interval without durations (result NOT_CAPTURED), a
/// failed one is not seen, and the flight recorder keeps them, recorded at entry: a sticky
/// failure of the sync writes them under its incident. Other stats functions keep their return.
#[test]
fn by_default_stats_mode_launches_are_entry_only_and_still_recorded() {
    let _alone = support::exclusive();
    let fixtures = Fixtures::build();
    let data = data_dir();
    let config = stats_config_fleet_default(&fixtures, data.path(), "");
    let agent = Agent::start(&config, &[]);
    let (pid, _) = fixtures.run_workload(
        &["sequence", "1"],
        &[(
            "FAKE_CUDA_RESULTS",
            "cuCtxSynchronize=700,cuLaunchKernel_ptsz=1",
        )],
    );
    let stopped = agent.stop();
    assert!(stopped.status.success(), "{}", stopped.log);
    assert_eq!(
        launch_rows(data.path(), pid),
        [
            "cuLaunchKernel NOT_CAPTURED true 120 2 1 256 1 null null null cuda_workload",
            "cuLaunchKernelEx NOT_CAPTURED true null null null null null null null null cuda_workload",
            "cuLaunchKernel_ptsz NOT_CAPTURED true 7 1 1 32 1 null null null cuda_workload",
        ]
    );
    let stats = duckdb(&format!(
        "select function, result_name, calls, \
         case when duration_sum_ns is null then 'untimed' else 'timed' end \
         from read_parquet('{}/cuda_stats/**/*.parquet', hive_partitioning = true) \
         where pid = {pid} order by function, result_name",
        data.path().display()
    ));
    let stats: Vec<String> = stats.into_iter().map(|row| row.join(" ")).collect();
    assert_eq!(
        stats,
        [
            "cuCtxSynchronize CUDA_ERROR_ILLEGAL_ADDRESS 1 timed",
            "cuLaunchKernel NOT_CAPTURED 1 untimed",
            "cuLaunchKernelEx NOT_CAPTURED 1 untimed",
            "cuLaunchKernel_ptsz NOT_CAPTURED 1 untimed",
            "cuMemAlloc_v2 CUDA_ERROR_OUT_OF_MEMORY 1 timed",
            "cuMemAlloc_v2 CUDA_SUCCESS 1 timed",
        ],
        "{}",
        stopped.log
    );
}
