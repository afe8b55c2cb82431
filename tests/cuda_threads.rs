//! Real eBPF, many threads: every call of every workload thread comes out as one row of that
//! thread, whether its entry and return met in the thread's in-flight slot or, when the slot
//! was taken, in the hash table behind it.

use crate::support;
use crate::support::agent::{data_dir, Agent};
use crate::support::cuda_rows::rows;
use crate::support::lake::read_table;
use crate::support::Fixtures;

#[test]
fn threads_are_told_apart_and_nothing_is_lost_under_load() {
    let _alone = support::exclusive();
    assert_threads_told_apart("", 4, 5_000);
}

/// One in-flight slot for every thread: while one thread's call holds it, the other threads'
/// calls go through the hash table, so both paths run side by side under contention (8 threads
/// on the machine's cores), and still every call is one exact row.
#[test]
fn calls_whose_slot_is_taken_go_through_the_hash_and_nothing_is_lost() {
    let _alone = support::exclusive();
    assert_threads_told_apart("inflight_slots = 1\n", 8, 5_000);
}

/// `threads` workload threads make `per_thread` allocations and frees each under an agent with
/// `extra` in `[sources.cuda]`; every call must come out as its thread's row.
fn assert_threads_told_apart(extra: &str, threads: usize, per_thread: u64) {
    let fixtures = Fixtures::build();
    let data = data_dir();
    let config = fixtures.cuda_config(data.path(), r#"["default"]"#).replace(
        "drain_interval_ms = 20\n",
        &format!("drain_interval_ms = 20\n{extra}"),
    );
    let agent = Agent::start(&config, &[]);
    let (pid, stdout) = fixtures.run_workload(
        &["threads", &threads.to_string(), &per_thread.to_string()],
        &[],
    );
    let calls = threads as u64 * per_thread * 2;
    assert_eq!(stdout.trim(), format!("workload: threads calls={calls}"));
    let stopped = agent.stop();
    assert_eq!(stopped.assert_nothing_lost("cuda", "cuda"), calls);
    let rows = rows(&read_table(data.path(), "cuda"));
    let mut per_thread_counts = std::collections::BTreeMap::<i32, (u64, u64)>::new();
    for row in &rows {
        assert_eq!(row.pid, pid as i32);
        let entry = per_thread_counts.entry(row.tid).or_default();
        match row.call.function.as_str() {
            "cuMemAlloc_v2" => {
                assert_eq!(row.call.bytes, Some(4096));
                assert!(row.call.device_ptr.is_some(), "an allocation's pointer");
                entry.0 += 1;
            }
            "cuMemFree_v2" => entry.1 += 1,
            other => panic!("unexpected {other}"),
        }
    }
    assert_eq!(
        per_thread_counts.len(),
        threads,
        "one set of rows per worker thread"
    );
    assert!(
        per_thread_counts
            .values()
            .all(|&counts| counts == (per_thread, per_thread)),
        "{per_thread_counts:?}"
    );
    assert!(
        !per_thread_counts.contains_key(&(pid as i32)),
        "the main thread made no calls"
    );
}
