//! The flight recorder on real eBPF: in stats mode the stand-in workload's launches become no
//! rows, until an incident starts for the process; then its calls of the seconds before are
//! written as `cuda` rows marked `flight_recorder`, carrying the incident's id, once per
//! incident. Nothing is written while no incident happens.

use std::time::Duration;

use crate::support;
use crate::support::agent::{data_dir, Agent};
use crate::support::cuda_stats::stats_config;
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
