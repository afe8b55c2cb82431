//! Real eBPF: the agent attaches uprobes to a stand-in libcuda.so.1, a workload makes a known
//! sequence of driver API calls, and exactly those rows, with exactly those argument values,
//! must come out in Parquet (read back with arrow and with DuckDB).

use crate::support;
use crate::support::agent::{data_dir, Agent};
use crate::support::cuda_rows::{rows, Call};
use crate::support::lake::{duckdb, files, read_table};
use crate::support::Fixtures;

const S: u64 = 0x5000;
const BASE: u64 = 0x7f00_0000_0000;
const STEP: u64 = 0x10_0000;

fn call(function: &str, bytes: Option<u64>, device_ptr: Option<u64>, stream: Option<u64>) -> Call {
    Call {
        function: function.into(),
        result: 0,
        result_name: "CUDA_SUCCESS".into(),
        bytes,
        device_ptr,
        stream,
        launch: None,
    }
}

fn launch(function: &str, dims: [u32; 7]) -> Call {
    Call {
        launch: Some(dims),
        ..call(function, None, None, Some(S))
    }
}

fn failed(mut c: Call, result: u32, name: &str) -> Call {
    c.result = result;
    c.result_name = name.into();
    c
}

/// What `cuda_workload sequence N` calls, with cuCtxSynchronize made to fail with 700.
pub(crate) fn expected_sequence(iterations: u64) -> Vec<Call> {
    let mut calls = Vec::new();
    for i in 0..iterations {
        let d1 = BASE + (3 * i) * STEP;
        let d2 = d1 + STEP;
        let d3 = d2 + STEP;
        calls.extend([
            call("cuInit", None, None, None),
            call("cuDevicePrimaryCtxRetain", None, None, None),
            call("cuCtxCreate_v2", None, None, None),
            call("cuMemAlloc_v2", Some(1_048_576), Some(d1), None),
            call("cuMemAllocManaged", Some(4096), Some(d2), None),
            call("cuMemAllocAsync", Some(65_536), Some(d3), Some(S)),
            call("cuMemcpyHtoD_v2", Some(4096), Some(d1), None),
            call("cuMemcpyDtoH_v2", Some(2048), Some(d1), None),
            call("cuMemcpyDtoD_v2", Some(1024), Some(d2), None),
            call("cuMemcpyAsync", Some(512), Some(d2), Some(S)),
            call("cuMemcpyHtoDAsync_v2", Some(256), Some(d1), Some(S)),
            call("cuMemcpyDtoHAsync_v2", Some(128), Some(d1), Some(S)),
            launch("cuLaunchKernel", [120, 2, 1, 256, 1, 1, 1024]),
            launch("cuLaunchKernelEx", [64, 4, 2, 128, 2, 1, 2048]),
            launch("cuLaunchKernel_ptsz", [7, 1, 1, 32, 1, 1, 0]),
            call("cuGraphLaunch", None, None, Some(S)),
            call("cuStreamSynchronize", None, None, Some(S)),
            call("cuStreamSynchronize_ptsz", None, None, Some(S)),
            call("cuEventSynchronize", None, None, None),
            call("cuModuleLoadData", None, None, None),
            call("cuLibraryLoadData", None, None, None),
            // Failed allocation: the size is recorded, no pointer exists.
            failed(
                call("cuMemAlloc_v2", Some(1 << 40), None, None),
                2,
                "CUDA_ERROR_OUT_OF_MEMORY",
            ),
            failed(
                call("cuCtxSynchronize", None, None, None),
                700,
                "CUDA_ERROR_ILLEGAL_ADDRESS",
            ),
            call("cuCtxSynchronize_v2", None, None, None),
            call("cuMemFreeAsync", None, Some(d3), Some(S)),
            call("cuMemFree_v2", None, Some(d1), None),
            call("cuMemFree_v2", None, Some(d2), None),
            call("cuCtxDestroy_v2", None, None, None),
            call("cuDriverGetVersion", None, None, None),
            call("cuDeviceGetCount", None, None, None),
        ]);
    }
    calls
}

pub(crate) const NAMED_EXTRAS: &str = r#"["default", "cuDriverGetVersion", "cuDeviceGetCount"]"#;

#[test]
fn every_call_of_the_workload_becomes_one_exact_row() {
    let _shared = support::shared();
    let fixtures = Fixtures::build();
    let data = data_dir();
    let agent = Agent::start(&fixtures.cuda_config(data.path(), NAMED_EXTRAS), &[]);
    assert!(agent.log().contains("uprobe_multi=true"), "{}", agent.log());
    let (pid, stdout) = fixtures.run_workload(
        &["sequence", "2"],
        &[("FAKE_CUDA_RESULTS", "cuCtxSynchronize=700")],
    );
    assert_eq!(stdout.trim(), "workload: sequence iterations=2 calls=60");
    let stopped = agent.stop();
    assert!(stopped.status.success(), "{}", stopped.log);
    assert_eq!(stopped.assert_nothing_lost("cuda", "cuda"), 60);

    let rows = rows(&read_table(data.path(), "cuda"));
    assert!(
        rows.iter()
            .all(|r| r.pid == pid as i32 && r.tid == pid as i32),
        "only the workload's calls"
    );
    assert!(rows.iter().all(|r| r.comm == "cuda_workload"));
    assert!(rows.iter().all(|r| r.duration_ns > 0));
    let now_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64;
    assert!(
        rows.iter()
            .all(|r| (now_ns - r.time_ns).abs() < 120_000_000_000),
        "times are wall-clock now"
    );
    let calls: Vec<Call> = rows.into_iter().map(|r| r.call).collect();
    assert_eq!(calls, expected_sequence(2));

    // Every file is complete and named as the layout says.
    // (Besides them, the run's accounting document under _accounting/, see tests/report.rs,
    // and the agent's lock on the root, .gpuship.lock.)
    for path in files(data.path()) {
        if path.starts_with(data.path().join("_accounting"))
            || path == data.path().join(".gpuship.lock")
        {
            continue;
        }
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        assert!(
            name.starts_with("part-") && name.ends_with(".parquet"),
            "{name}"
        );
        let rel = path
            .strip_prefix(data.path())
            .unwrap()
            .to_string_lossy()
            .into_owned();
        assert!(
            rel.starts_with("cuda/dt=") && rel.contains("/hour="),
            "{rel}"
        );
    }

    // The same answers through DuckDB, as a user would ask.
    let glob = format!("{}/cuda/**/*.parquet", data.path().display());
    let by_function = duckdb(&format!(
        "select function, count(*), sum(bytes), count(device_ptr), max(result_name) \
         from read_parquet('{glob}', hive_partitioning=true) where pid = {pid} \
         and function in ('cuMemAlloc_v2', 'cuCtxSynchronize', 'cuLaunchKernelEx', 'cuMemFree_v2') \
         group by function order by function"
    ));
    let expected: Vec<Vec<String>> = [
        [
            "cuCtxSynchronize",
            "2",
            "NULL",
            "0",
            "CUDA_ERROR_ILLEGAL_ADDRESS",
        ],
        ["cuLaunchKernelEx", "2", "NULL", "0", "CUDA_SUCCESS"],
        [
            "cuMemAlloc_v2",
            "4",
            &(2 * (1_048_576u64 + (1 << 40))).to_string(),
            "2",
            "CUDA_SUCCESS",
        ],
        ["cuMemFree_v2", "4", "NULL", "4", "CUDA_SUCCESS"],
    ]
    .iter()
    .map(|r| r.iter().map(|s| s.to_string()).collect())
    .collect();
    assert_eq!(by_function, expected);
    let typed = duckdb(&format!(
        "select min(typeof(time)), min(typeof(dt)), count(*) filter (where strftime(time at time zone 'UTC', '%Y-%m-%d') = cast(dt as varchar) \
         and hour = hour(time at time zone 'UTC')), count(*) from read_parquet('{glob}', hive_partitioning=true)"
    ));
    assert_eq!(
        typed,
        vec![vec![
            "TIMESTAMP WITH TIME ZONE".to_string(),
            "DATE".into(),
            "60".into(),
            "60".into()
        ]]
    );
}

#[test]
fn a_glob_probes_every_matching_export_minus_the_excluded_getters() {
    let _shared = support::shared();
    let fixtures = Fixtures::build();
    let data = data_dir();
    let config = fixtures.cuda_config(data.path(), r#"["cu*"]"#);
    let agent = Agent::start(&config, &[]);
    agent.wait_for_log("symbols=63", std::time::Duration::from_secs(5));
    fixtures.run_workload(&["sequence", "1"], &[]);
    let stopped = agent.stop();
    assert_eq!(stopped.assert_nothing_lost("cuda", "cuda"), 30);
    let calls: Vec<Call> = rows(&read_table(data.path(), "cuda"))
        .into_iter()
        .map(|r| r.call)
        .collect();
    let mut expected = expected_sequence(1);
    expected[22] = call("cuCtxSynchronize", None, None, None);
    // Known functions keep their decoded arguments when a glob selects them; the rest
    // (cuDriverGetVersion, cuDeviceGetCount) get name, duration and result.
    assert_eq!(calls, expected);
}

#[test]
fn entry_only_launches_keep_their_arguments_without_duration_or_result() {
    let _shared = support::shared();
    let fixtures = Fixtures::build();
    let data = data_dir();
    let config = fixtures.cuda_config(data.path(), NAMED_EXTRAS).replace(
        "[sources.cuda]\n",
        "[sources.cuda]\nentry_only = [\"cuLaunchKernel*\"]\n",
    );
    let agent = Agent::start(&config, &[]);
    fixtures.run_workload(
        &["sequence", "1"],
        &[("FAKE_CUDA_RESULTS", "cuCtxSynchronize=700")],
    );
    let stopped = agent.stop();
    assert_eq!(stopped.assert_nothing_lost("cuda", "cuda"), 30);
    let rows = rows(&read_table(data.path(), "cuda"));
    let mut expected = expected_sequence(1);
    for call in expected
        .iter_mut()
        .filter(|c| c.function.starts_with("cuLaunchKernel"))
    {
        call.result_name = "NOT_CAPTURED".into();
    }
    assert_eq!(
        rows.iter().map(|r| r.call.clone()).collect::<Vec<_>>(),
        expected
    );
    // Entry-only rows have no duration; the others do.
    for row in &rows {
        let entry_only = row.call.function.starts_with("cuLaunchKernel");
        assert_eq!(row.duration_ns == 0, entry_only, "{}", row.call.function);
    }
    // No return probe on those three functions: 27 return links' worth of calls matched.
    assert_eq!(stopped.ring("cuda")["unmatched_returns"], 0);
}

#[test]
fn per_symbol_probes_capture_the_same_rows_as_uprobe_multi() {
    let _shared = support::shared();
    let fixtures = Fixtures::build();
    let data = data_dir();
    let config = fixtures.cuda_config(data.path(), NAMED_EXTRAS).replace(
        "drain_interval_ms = 20",
        "drain_interval_ms = 20\nuprobe_multi = false",
    );
    let agent = Agent::start(&config, &[]);
    assert!(
        agent.log().contains("uprobe_multi=false"),
        "{}",
        agent.log()
    );
    fixtures.run_workload(
        &["sequence", "1"],
        &[("FAKE_CUDA_RESULTS", "cuCtxSynchronize=700")],
    );
    let stopped = agent.stop();
    assert_eq!(stopped.assert_nothing_lost("cuda", "cuda"), 30);
    let calls: Vec<Call> = rows(&read_table(data.path(), "cuda"))
        .into_iter()
        .map(|r| r.call)
        .collect();
    assert_eq!(calls, expected_sequence(1));
}
