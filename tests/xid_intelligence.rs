//! XID intelligence end to end: real-format kernel-log lines from many drivers decoded with
//! their catalog entries and sub-fields; a cascade on one GPU becomes one incident whose root is
//! its first XID, and the CUDA calls it broke carry the incident id; without a process in the
//! log line, the XID is attributed to the process using the GPU. The DuckDB queries of
//! docs/rca.md run as written against the agent's output.

use std::path::Path;
use std::time::Duration;

use crate::support;
use crate::support::agent::{data_dir, Agent};
use crate::support::lake::{duckdb, rca_query};
use crate::support::{repo_root, Fixtures};

/// Writes a driver line at warning level.
fn kmsg(line: &str) {
    support::kmsg(&format!("<4>{line}"));
}

/// A fake /proc/driver/nvidia/gpus with two GPUs (minors 0 and 1).
fn gpu_dir() -> tempfile::TempDir {
    support::lake::fake_gpu_dir(
        "NVIDIA H100 80GB HBM3",
        &[
            (
                0,
                "0000:3b:00.0",
                "GPU-3b3b3b3b-0000-1111-2222-333333333333",
            ),
            (
                1,
                "0000:86:00.0",
                "GPU-86868686-0000-1111-2222-333333333333",
            ),
        ],
    )
}

fn config(fixtures: &Fixtures, gpus: &Path, dev: &Path, lake: &Path) -> String {
    fixtures.lake_config("node-x", "", (gpus, dev, lake))
}

fn xid_rows(lake: &Path, columns: &str) -> Vec<Vec<String>> {
    duckdb(&format!(
        "select {columns} from read_parquet('{}/xid/**/*.parquet', hive_partitioning=true) order by kmsg_seq",
        lake.display()
    ))
}

#[test]
fn real_lines_from_many_drivers_are_decoded_with_their_catalog_entries() {
    let _alone = support::exclusive();
    let text =
        std::fs::read_to_string(repo_root().join("tests/fixtures/kmsg_xid_samples.tsv")).unwrap();
    let samples: Vec<&str> = text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| l.split('\t').next().unwrap())
        .collect();
    assert_eq!(samples.len(), 56);
    let fixtures = Fixtures::build();
    let (data, gpus, dev) = (data_dir(), gpu_dir(), tempfile::tempdir().unwrap());
    let mut config = config(&fixtures, gpus.path(), dev.path(), data.path());
    config = config.replace("[sources.cuda]\n", "[sources.cuda]\nenabled = false\n");
    let agent = Agent::start(&config, &[]);
    for line in &samples {
        kmsg(line);
    }
    kmsg("NVRM: Xid (PCI:0000:3b:00): 999, pid=1, name=x, a code from the future");
    agent.wait_for_log("code=999", Duration::from_secs(20));
    let stopped = agent.stop();
    assert!(stopped.status.success(), "{}", stopped.log);
    assert_eq!(
        stopped.outcome["accounting"]["kmsg"]["xids"], 57,
        "{}",
        stopped.outcome
    );
    assert_eq!(stopped.outcome["accounting"]["kmsg"]["parse_errors"], 0);
    let sink = stopped.sink("xid");
    assert_eq!(
        (sink["received"].as_u64(), sink["delivered"].as_u64()),
        (Some(57), Some(57))
    );

    let rows = xid_rows(
        data.path(),
        "code, pci_bus_id, coalesce(pid::varchar, 'NULL'), coalesce(comm, 'NULL'), xid_name, category, severity, action, \
         coalesce(mig_gpu_instance::varchar, 'NULL'), coalesce(caused_by_xid::varchar, 'NULL'), \
         coalesce(recovery_action, 'NULL'), coalesce(ecc_location, 'NULL'), coalesce(fault_engine, 'NULL'), \
         coalesce(printf('0x%x', fault_address), 'NULL'), coalesce(fault_type, 'NULL'), coalesce(gsp_function, 'NULL'), catalog_version, driver_version",
    );
    assert_eq!(rows.len(), 57);
    let find = |code: &str, bus: &str| -> &Vec<String> {
        rows.iter()
            .find(|r| r[0] == code && r[1] == bus)
            .unwrap_or_else(|| panic!("no XID {code} on {bus}: {rows:?}"))
    };
    // A page fault from a recent driver: process, engine, address, fault type.
    let fault = find("31", "0000:00:07.0");
    assert_eq!(&fault[2..4], ["2512125", "python3.10"]);
    assert_eq!(fault[4], "GPU MMU page fault");
    assert_eq!(
        (fault[5].as_str(), fault[7].as_str()),
        ("application", "restart_application")
    );
    assert_eq!(fault[12], "GRAPHICS GPCCLIENT_T1_8");
    // MIG instance from the bus-id envelope; '<unknown>' processes stay empty.
    assert_eq!(find("94", "0000:01:00.0")[8], "5");
    let contained = rows
        .iter()
        .find(|r| r[0] == "94" && r[1] == "0000:00:08.0")
        .unwrap();
    assert_eq!(&contained[2..4], ["NULL", "NULL"]);
    assert_eq!(
        (contained[10].as_str(), contained[11].as_str()),
        ("None", "SM (0x1)")
    );
    let uncontained = find("95", "0000:01:00.0");
    assert_eq!(
        (uncontained[10].as_str(), uncontained[11].as_str()),
        ("GPU Reset Required", "LTC TAG (0x2,0x1)")
    );
    // "caused by previous Xid", a domain other than 0, recovery actions, GSP, ECC.
    assert_eq!(find("45", "0000:dc:00.0")[9], "149");
    assert!(rows.iter().any(|r| r[0] == "149" && r[1] == "0019:01:00.0"));
    assert_eq!(find("154", "0000:01:00.0")[10], "GPU Reset Required");
    assert_eq!(find("119", "0002:00:00.0")[15], "GSP_RM_CONTROL");
    let dbe = find("48", "0000:07:00.0");
    assert_eq!((dbe[6].as_str(), dbe[7].as_str()), ("fatal", "reset_gpu"));
    let fell_off = find("79", "0000:5a:00.0");
    assert_eq!(
        (fell_off[5].as_str(), fell_off[6].as_str()),
        ("hardware", "fatal")
    );
    // Unknown codes still ship, marked unknown.
    let future = find("999", "0000:3b:00.0");
    assert_eq!(
        (future[4].as_str(), future[5].as_str()),
        ("Unknown XID", "unknown")
    );
    assert!(rows
        .iter()
        .all(|r| r[16] == "2026.11-r620" && r[17] == "580.159.04"));
}

#[test]
fn a_cascade_and_the_cuda_errors_it_caused_are_one_incident() {
    let _alone = support::exclusive();
    let fixtures = Fixtures::build();
    let (data, gpus, dev) = (data_dir(), gpu_dir(), tempfile::tempdir().unwrap());
    let agent = Agent::start(
        &config(&fixtures, gpus.path(), dev.path(), data.path()),
        &[],
    );
    let workload = fixtures.gated_sequence(data.path());
    let pid = workload.pid();
    kmsg(&format!("NVRM: Xid (PCI:0000:3b:00): 31, pid={pid}, name=cuda_workload, channel 0x0000000a, intr 00000000. MMU Fault: ENGINE GRAPHICS GPC1 GPCCLIENT_T1_8 faulted @ 0x7f00_00000000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_WRITE"));
    kmsg(&format!("NVRM: Xid (PCI:0000:3b:00): 13, pid={pid}, name=cuda_workload, Graphics SM Warp Exception on (GPC 1, TPC 3, SM 0): Out Of Range Address"));
    kmsg("NVRM: Xid (PCI:0000:86:00): 79, GPU has fallen off the bus.");
    agent.wait_for_log("code=79", Duration::from_secs(10));
    workload.release();
    let stopped = agent.stop();
    assert!(stopped.status.success(), "{}", stopped.log);

    let lake = data.path();
    let incidents = duckdb(&rca_query(
        "incidents",
        "gpuship-data",
        &lake.display().to_string(),
    ));
    assert_eq!(incidents.len(), 2, "{incidents:?}");
    let cell = |row: &Vec<String>, i: usize| row[i].clone();
    // incident_id, started, xids, root_code, root_name, codes, pci_bus_id
    assert!(cell(&incidents[0], 0).starts_with("node-x/0000:3b:00.0/"));
    assert_eq!(cell(&incidents[0], 2), "2");
    assert_eq!(cell(&incidents[0], 3), "31");
    assert_eq!(cell(&incidents[0], 4), "GPU MMU page fault");
    assert_eq!(cell(&incidents[0], 5), "[31, 13]");
    assert!(cell(&incidents[1], 0).starts_with("node-x/0000:86:00.0/"));
    assert_eq!(cell(&incidents[1], 5), "[79]");

    let roots = duckdb(&rca_query(
        "roots",
        "gpuship-data",
        &lake.display().to_string(),
    ));
    assert_eq!(roots.len(), 2);
    // code, xid_name, severity, action, pci_bus_id, gpu_uuid, pid, comm, attribution, affected_pids
    let root: Vec<String> = roots[0].iter().take(10).cloned().collect();
    assert_eq!(
        root,
        [
            "31",
            "GPU MMU page fault",
            "error",
            "restart_application",
            "0000:3b:00.0",
            "GPU-3b3b3b3b-0000-1111-2222-333333333333",
            &pid.to_string(),
            "cuda_workload",
            "driver_log",
            &format!("[{pid}]"),
        ]
    );
    assert_eq!(roots[1][8], "none", "nobody used the other GPU");

    let failed = duckdb(&rca_query(
        "failed_calls",
        "gpuship-data",
        &lake.display().to_string(),
    ));
    assert_eq!(
        failed,
        [
            vec![
                "31",
                "GPU MMU page fault",
                &pid.to_string(),
                "cuCtxSynchronize",
                "700",
                "CUDA_ERROR_ILLEGAL_ADDRESS",
                "1"
            ],
            vec![
                "31",
                "GPU MMU page fault",
                &pid.to_string(),
                "cuMemAlloc_v2",
                "2",
                "CUDA_ERROR_OUT_OF_MEMORY",
                "1"
            ],
        ]
    );
    let faults = duckdb(&rca_query(
        "page_faults",
        "gpuship-data",
        &lake.display().to_string(),
    ));
    assert_eq!(faults.len(), 1);
    let fault: Vec<String> = faults[0].iter().skip(1).cloned().collect();
    assert_eq!(
        fault,
        [
            "0000:3b:00.0",
            &pid.to_string(),
            "cuda_workload",
            "GRAPHICS GPC1 GPCCLIENT_T1_8",
            "0x7f0000000000",
            "FAULT_PDE",
            "ACCESS_TYPE_VIRT_WRITE"
        ]
    );
    let sources = duckdb(&rca_query(
        "sources",
        "gpuship-data",
        &lake.display().to_string(),
    ));
    assert_eq!(sources, [["kmsg", "3"]]);
    // Successful calls carry no incident.
    let linked = duckdb(&format!(
        "select count(*) filter (where incident_id is not null), count(*) from read_parquet('{}/cuda/**/*.parquet')",
        lake.display()
    ));
    assert_eq!(linked[0], ["2", "28"]);
}

#[test]
fn without_a_process_in_the_log_the_xid_goes_to_the_process_using_the_gpu() {
    let _alone = support::exclusive();
    let fixtures = Fixtures::build();
    let (data, gpus, dev) = (data_dir(), gpu_dir(), tempfile::tempdir().unwrap());
    let device = dev.path().join("nvidia0");
    std::fs::write(&device, b"").unwrap();
    let agent = Agent::start(
        &config(&fixtures, gpus.path(), dev.path(), data.path()),
        &[],
    );
    // One process holds the GPU's device file and makes calls; a bystander only makes calls.
    let mut user = fixtures
        .workload(&["launches", "0", "100000"])
        .env("FAKE_CUDA_DEVICE_FILE", &device)
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("workload");
    let mut bystander = fixtures
        .workload(&["launches", "0", "100000"])
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("bystander");
    std::thread::sleep(Duration::from_millis(800));
    kmsg("NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.");
    agent.wait_for_log("code=79", Duration::from_secs(10));
    for child in [&user, &bystander] {
        // SAFETY: kill(2) on children this test started.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    }
    let (user_pid, _) = (user.id(), bystander.id());
    assert!(user.wait().unwrap().success());
    assert!(bystander.wait().unwrap().success());
    let stopped = agent.stop();
    assert!(stopped.status.success(), "{}", stopped.log);
    let rows = xid_rows(
        data.path(),
        "code, pid::varchar, comm, attribution, affected_pids::varchar, root_candidate::varchar",
    );
    let expected: Vec<String> = [
        "79".to_string(),
        user_pid.to_string(),
        "cuda_workload".into(),
        "cuda_activity".into(),
        format!("[{user_pid}]"),
        "true".into(),
    ]
    .into();
    assert_eq!(rows, [expected]);
}
