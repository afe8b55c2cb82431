//! Stopping the agent in the middle of a stream of calls leaves only complete, readable
//! Parquet files, and every event the kernel emitted is in them.

use std::time::Duration;

use crate::support;
use crate::support::agent::{data_dir, Agent};
use crate::support::lake::{files, read_table};
use crate::support::Fixtures;

#[test]
fn sigterm_mid_stream_leaves_complete_files_and_loses_nothing() {
    let _shared = support::shared();
    let fixtures = Fixtures::build();
    let data = data_dir();
    // Small files and row groups so that shutdown lands between rotations.
    let config = fixtures.cuda_config(data.path(), r#"["default"]"#).replace(
        "type = \"parquet\"\n",
        "type = \"parquet\"\nmax_file_rows = 20000\nrow_group_rows = 5000\n",
    );
    let agent = Agent::start(&config, &[]);
    let mut workload = fixtures
        .workload(&["launches", "0", "20000"])
        .spawn()
        .expect("workload");
    // Stop while calls are flowing: wait until progress shows CUDA traffic, then a bit more.
    agent.wait_for_log("cuda_per_sec=", Duration::from_secs(20));
    std::thread::sleep(Duration::from_millis(700));
    let stopped = agent.stop();
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(workload.id() as i32, libc::SIGTERM) };
    workload.wait().expect("workload exits");
    assert!(stopped.status.success(), "{}", stopped.log);

    let delivered = stopped.assert_nothing_lost("cuda", "cuda");
    assert!(
        delivered > 10_000,
        "the stream was running: {delivered} events"
    );
    let all = files(data.path());
    assert!(all.len() >= 2, "rotation happened: {all:?}");
    for path in &all {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        // The agent's lock on the root (docs/operations.md, "State directory") stays.
        assert!(
            !name.starts_with('.') || name == ".gpuship.lock",
            "temporary file left behind: {}",
            path.display()
        );
    }
    let rows: usize = read_table(data.path(), "cuda")
        .iter()
        .map(|b| b.num_rows())
        .sum();
    assert_eq!(rows as u64, delivered);
    assert_eq!(
        rows as u64,
        stopped.ring("cuda")["received"].as_u64().unwrap()
    );
    assert!(
        stopped.log.contains("consumer drained all rings"),
        "{}",
        stopped.log
    );
}

#[test]
fn sigkill_never_leaves_a_partial_file_under_a_final_name() {
    let _shared = support::shared();
    let fixtures = Fixtures::build();
    let data = data_dir();
    let config = fixtures.cuda_config(data.path(), r#"["default"]"#).replace(
        "type = \"parquet\"\n",
        "type = \"parquet\"\nmax_file_rows = 5000\n",
    );
    let agent = Agent::start(&config, &[]);
    let mut workload = fixtures
        .workload(&["launches", "0", "20000"])
        .spawn()
        .expect("workload");
    std::thread::sleep(Duration::from_millis(1500));
    // SAFETY: kill(2) on the pid of the agent this test started.
    unsafe { libc::kill(agent.pid() as i32, libc::SIGKILL) };
    std::thread::sleep(Duration::from_millis(200));
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(workload.id() as i32, libc::SIGTERM) };
    workload.wait().expect("workload exits");
    drop(agent);
    let finals: Vec<_> = files(data.path())
        .into_iter()
        .filter(|p| !p.file_name().unwrap().to_string_lossy().starts_with('.'))
        .collect();
    assert!(!finals.is_empty(), "files were completed before the kill");
    // Every file under a final name is complete: read_table opens each one and reads it all.
    let rows: usize = read_table(data.path(), "cuda")
        .iter()
        .map(|b| b.num_rows())
        .sum();
    // Only files finished by size exist (nothing closed them cleanly), each with at least
    // max_file_rows rows.
    assert!(
        rows >= finals.len() * 5000,
        "{rows} rows in {} files",
        finals.len()
    );
}
