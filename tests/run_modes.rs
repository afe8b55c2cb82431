//! `gpuship run -- COMMAND` and `gpuship run --pid PID`: only the chosen process tree is
//! traced, the run ends with it, and the summary and exit code are the command's.

use std::time::Duration;

use crate::support;
use crate::support::agent::{data_dir, Agent};
use crate::support::lake::read_table;
use crate::support::Fixtures;
use arrow_array::cast::AsArray;
use arrow_array::types::Int32Type;

fn pids(data: &std::path::Path) -> std::collections::BTreeMap<i32, usize> {
    let mut counts = std::collections::BTreeMap::new();
    for batch in read_table(data, "cuda") {
        let pid = batch
            .column_by_name("pid")
            .unwrap()
            .as_primitive::<Int32Type>();
        for i in 0..batch.num_rows() {
            *counts.entry(pid.value(i)).or_default() += 1;
        }
    }
    counts
}

#[test]
fn a_command_and_its_children_are_traced_and_nothing_else() {
    let _shared = support::shared();
    let fixtures = Fixtures::build();
    let data = data_dir();
    let config = fixtures.cuda_config(
        data.path(),
        r#"["default", "cuDriverGetVersion", "cuDeviceGetCount"]"#,
    );
    // An unrelated process using the same library while the command runs.
    let mut bystander = fixtures
        .workload(&["launches", "0", "1000"])
        .spawn()
        .expect("bystander");
    let workload = fixtures.workload.display().to_string();
    let libcuda = fixtures.libcuda.display().to_string();
    let agent = Agent::start(
        &config,
        &[
            "--",
            "env",
            &format!("CUDA_LIB={libcuda}"),
            &workload,
            "fork",
        ],
    );
    let stopped = agent.wait();
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(bystander.id() as i32, libc::SIGTERM) };
    bystander.wait().expect("bystander exits");

    assert!(stopped.status.success(), "{}", stopped.log);
    assert!(
        stopped.log.contains("workload: fork child_exit=0"),
        "{}",
        stopped.log
    );
    assert_eq!(stopped.assert_nothing_lost("cuda", "cuda"), 30);
    // The parent only forks; its child makes the 30 calls. The bystander is not traced.
    let counts = pids(data.path());
    assert_eq!(counts.len(), 1, "{counts:?}");
    assert_eq!(counts.values().copied().collect::<Vec<_>>(), vec![30]);
    assert_ne!(*counts.keys().next().unwrap(), bystander.id() as i32);
    // The human summary and its JSON form.
    assert!(stopped.log.contains("CUDA calls: 30"), "{}", stopped.log);
    assert!(
        stopped
            .log
            .contains("bytes allocated: 1118208  bytes copied: 8064"),
        "{}",
        stopped.log
    );
    let summary = &stopped.outcome["summary"];
    assert_eq!(summary["calls"]["cuMemFree_v2"], 2);
    assert_eq!(
        summary["failures"]["cuMemAlloc_v2 CUDA_ERROR_OUT_OF_MEMORY"],
        1
    );
    assert_eq!(stopped.outcome["command_exit_code"], 0);
}

#[test]
fn the_exit_code_of_the_command_is_gpuships() {
    let _shared = support::shared();
    let fixtures = Fixtures::build();
    let data = data_dir();
    let agent = Agent::start(
        &fixtures.cuda_config(data.path(), r#"["default"]"#),
        &["--", "sh", "-c", "exit 7"],
    );
    let stopped = agent.wait();
    assert_eq!(stopped.status.code(), Some(7), "{}", stopped.log);
    assert_eq!(stopped.outcome["command_exit_code"], 7);
}

#[test]
fn a_pid_is_traced_until_it_exits() {
    let _shared = support::shared();
    let fixtures = Fixtures::build();
    let data = data_dir();
    let gate = tempfile::tempdir().unwrap();
    let go = gate.path().join("go");
    let mut target = fixtures
        .workload(&["sequence", "3"])
        .env("WORKLOAD_WAIT_FILE", &go)
        .spawn()
        .expect("workload");
    let mut other = fixtures
        .workload(&["sequence", "1"])
        .env("WORKLOAD_WAIT_FILE", &go)
        .spawn()
        .expect("workload");
    let pid = target.id().to_string();
    let agent = Agent::start(
        &fixtures.cuda_config(data.path(), r#"["default"]"#),
        &["--pid", &pid],
    );
    std::fs::write(&go, b"").unwrap();
    assert!(target.wait().unwrap().success());
    assert!(other.wait().unwrap().success());
    let stopped = agent.wait();
    assert!(stopped.status.success(), "{}", stopped.log);
    assert!(
        stopped.log.contains("traced process exited"),
        "{}",
        stopped.log
    );
    // 28 default-set calls per iteration (the two getters are not in the default set).
    assert_eq!(stopped.assert_nothing_lost("cuda", "cuda"), 84);
    let counts = pids(data.path());
    assert_eq!(
        counts.into_iter().collect::<Vec<_>>(),
        vec![(target.id() as i32, 84)]
    );
    let _ = Duration::ZERO;
}
