//! An XID's suspects on real eBPF with the stand-in library: a kernel-log XID 31 naming a
//! process lists the kernels it launched last, most recent first, with their names, from the
//! flight recorder (the fleet default, launches in `stats` mode) or from its launch rows
//! (`rows` mode), each marked completed when a later synchronisation covering it returned.

use std::time::Duration;

use crate::support;
use crate::support::agent::{data_dir, Agent};
use crate::support::cuda_stats::stats_config_fleet_default;
use crate::support::lake::{duckdb, rca_query};
use crate::support::{kmsg, wait_until, Fixtures};

fn xid_31(pid: u32) {
    kmsg(&format!(
        "<4>NVRM: Xid (PCI:0000:00:06): 31, pid={pid}, name=cuda_workload, channel 0x0000000a, \
         intr 00000000. MMU Fault: ENGINE GRAPHICS GPC1 GPCCLIENT_T1_8 faulted @ 0x7f00_00000000. \
         Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_WRITE"
    ));
}

/// (function, handle, kernel_name_demangled, grid_x, completed) of each suspect of the XID of
/// `pid`, in list order, and the row's `suspect_kernel`.
fn suspects(data: &std::path::Path, pid: u32) -> (Vec<String>, Vec<Vec<String>>) {
    let table = format!(
        "read_parquet('{}/xid/**/*.parquet', hive_partitioning = true)",
        data.display()
    );
    let first = duckdb(&format!(
        "select coalesce(suspect_kernel, 'NULL'), cast(len(suspects) as varchar) from {table} where pid = {pid}"
    ));
    let list = duckdb(&format!(
        "select struct_extract(s, 'function'), cast(struct_extract(s, 'handle') as varchar), \
         struct_extract(s, 'kernel_name_demangled'), coalesce(cast(struct_extract(s, 'grid_x') as varchar), '-'), \
         cast(struct_extract(s, 'completed') as varchar), cast(struct_extract(s, 'tid') as varchar) \
         from (select unnest(suspects) as s, generate_subscripts(suspects, 1) as i from {table} where pid = {pid}) order by i"
    ));
    (first.into_iter().flatten().collect(), list)
}

fn wait_for_xid(agent: &Agent) {
    wait_until(
        Duration::from_secs(10),
        "the XID is written",
        || agent.log().contains("GPU MMU page fault"),
        || agent.log(),
    );
}

#[test]
fn the_fleet_default_names_an_xid_s_last_kernels_from_the_flight_recorder() {
    let _alone = support::exclusive();
    let fixtures = Fixtures::build();
    let data = data_dir();
    let config = stats_config_fleet_default(&fixtures, data.path(), "")
        .replace("kmsg = false", "kmsg = true");
    let agent = Agent::start(&config, &[]);
    let (pid, stdout) = fixtures.run_workload(&["kernels"], &[("WORKLOAD_LINGER_MS", "3000")]);
    assert!(stdout.contains("calls=19"), "{stdout}");
    xid_31(pid);
    wait_for_xid(&agent);
    let stopped = agent.stop();
    assert!(stopped.status.success(), "{}", stopped.log);
    let (first, list) = suspects(data.path(), pid);
    // Seven launches, all before the XID; launches are entry-only in stats mode (no stream,
    // cuLaunchKernelEx's geometry unread), and no synchronisation followed them.
    assert_eq!(first, ["unknown", "7"]);
    let long = format!("long_{}", "x".repeat(4995));
    let fill = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, (unsigned long)1> >(int, at::native::FillFunctor<float>, std::array<char*, (unsigned long)1>)";
    let tid = pid.to_string();
    let expected: Vec<Vec<String>> = [
        ["cuLaunchKernel", "14593280", "unknown", "7"],
        ["cuLaunchKernel", "1795162112", "reused()", "6"],
        ["cuLaunchKernel", "1795163136", "plain_c_kernel", "5"],
        ["cuLaunchKernel_ptsz", "1795162880", long.as_str(), "4"],
        [
            "cuLaunchKernelEx",
            "1795162624",
            "evil\n\u{1b}[31mname\"'../..",
            "-",
        ],
        ["cuLaunchKernel", "1795162368", fill, "2"],
        ["cuLaunchKernel", "1795162113", "wild_write(int*)", "1"],
    ]
    .iter()
    .map(|row| {
        row.iter()
            .map(|s| s.to_string())
            .chain(["false".to_string(), tid.clone()])
            .collect()
    })
    .collect();
    assert_eq!(list, expected);
    assert!(
        stopped.log.contains("suspect_kernel=unknown"),
        "{}",
        stopped.log
    );
    // docs/rca.md's query, as written there.
    let query = rca_query(
        "suspects",
        "gpuship-data",
        &data.path().display().to_string(),
    );
    let ranked: Vec<(String, String, String)> = duckdb(&query)
        .into_iter()
        .map(|row| (row[4].clone(), row[5].clone(), row[7].clone()))
        .collect();
    assert_eq!(ranked.len(), 7, "{ranked:?}");
    assert_eq!(ranked[1], ("2".into(), "reused()".into(), "False".into()));
    assert_eq!(
        ranked[6],
        ("7".into(), "wild_write(int*)".into(), "False".into())
    );
}

#[test]
fn rows_mode_suspects_know_which_launches_a_synchronisation_finished() {
    let _alone = support::exclusive();
    let fixtures = Fixtures::build();
    let data = data_dir();
    let config = fixtures
        .cuda_config(data.path(), r#"["default"]"#)
        .replace("kmsg = false", "kmsg = true")
        .replace("[sources.xid]\n", "[sources.xid]\nsuspects = 2\n");
    let agent = Agent::start(&config, &[]);
    // The stream syncs fail, so only the context sync after them shows the launches finished:
    // with it failing too, none did.
    let (finished, _) = fixtures.run_workload(
        &["sequence", "1"],
        &[
            (
                "FAKE_CUDA_RESULTS",
                "cuStreamSynchronize=700,cuStreamSynchronize_ptsz=700",
            ),
            ("WORKLOAD_LINGER_MS", "500"),
        ],
    );
    let (unfinished, _) = fixtures.run_workload(
        &["sequence", "1"],
        &[
            (
                "FAKE_CUDA_RESULTS",
                "cuStreamSynchronize=700,cuStreamSynchronize_ptsz=700,cuCtxSynchronize=700,cuCtxSynchronize_v2=700",
            ),
            ("WORKLOAD_LINGER_MS", "500"),
        ],
    );
    xid_31(finished);
    wait_for_xid(&agent);
    xid_31(unfinished);
    wait_until(
        Duration::from_secs(10),
        "both XIDs are written",
        || agent.log().matches("GPU MMU page fault").count() >= 2,
        || agent.log(),
    );
    let stopped = agent.stop();
    assert!(stopped.status.success(), "{}", stopped.log);
    for (pid, completed) in [(finished, "true"), (unfinished, "false")] {
        let (first, list) = suspects(data.path(), pid);
        assert_eq!(first, ["unknown", "2"], "pid {pid}");
        let tid = pid.to_string();
        // The stand-in launches handle 0x1234, made before any agent could see it.
        assert_eq!(
            list,
            [
                [
                    "cuLaunchKernel_ptsz",
                    "4660",
                    "unknown",
                    "7",
                    completed,
                    &tid
                ],
                ["cuLaunchKernelEx", "4660", "unknown", "64", completed, &tid],
            ],
            "pid {pid}"
        );
    }
}
