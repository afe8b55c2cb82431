//! No XID depends on a clean shutdown: an XID is in the lake within seconds while the agent
//! runs, survives a SIGKILL right after it was logged (the sink's XID journal), and one logged
//! while the agent was down is read at the next start (the kernel-log cursor); each exactly
//! once.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::support;
use crate::support::agent::{data_dir, Agent};
use crate::support::kmsg;
use crate::support::lake::read_table;
use arrow_array::cast::AsArray;
use arrow_array::types::UInt32Type;

/// Agent config: kernel-log XIDs only, Parquet into `lake`, state kept in `state`.
fn config(lake: &Path, state: &Path) -> String {
    format!(
        "[agent]\nstate_dir = \"{}\"\n\n[sources.xid]\ntracepoint = false\nkmsg = true\n\n\
         [sources.cuda]\nenabled = false\n\n[sources.driver]\nioctl = false\n\n\
         [[sinks]]\ntype = \"parquet\"\npath = \"{}\"\n",
        state.display(),
        lake.display()
    )
}

/// (code, source) of every XID row in the lake on bus `bus`.
fn xid_rows(lake: &Path, bus: &str) -> Vec<(u32, String)> {
    let mut rows = Vec::new();
    for batch in read_table(lake, "xid") {
        let buses = batch
            .column_by_name("pci_bus_id")
            .unwrap()
            .as_string::<i32>();
        let sources = batch.column_by_name("source").unwrap().as_string::<i32>();
        let codes = batch
            .column_by_name("code")
            .unwrap()
            .as_primitive::<UInt32Type>();
        for i in 0..batch.num_rows() {
            if buses.value(i) == bus {
                rows.push((codes.value(i), sources.value(i).to_string()));
            }
        }
    }
    rows
}

/// A bus id no other test (running in parallel, sharing the kernel log) uses.
fn unique_bus(tag: u8) -> String {
    format!("0000:{:02x}:{:02x}.0", 0xd0 + tag, std::process::id() % 256)
}

fn xid_line(bus: &str, code: u32) -> String {
    let short = bus.trim_end_matches(".0");
    format!(
        "<3>NVRM: Xid (PCI:{short}): {code}, pid=4242, name=trainer, GPU has fallen off the bus."
    )
}

/// Logs an XID 79 on `bus`, waits until the agent has taken it and then `after`, and kills the
/// agent with SIGKILL; returns its log.
fn log_xid_then_kill(agent: Agent, bus: &str, after: Duration) -> String {
    kmsg(&xid_line(bus, 79));
    agent.wait_for_log(&format!("pci_bus_id={bus}"), Duration::from_secs(10));
    std::thread::sleep(after);
    agent.kill_hard()
}

#[test]
fn an_xid_reaches_the_lake_within_seconds_while_the_agent_runs() {
    let _shared = support::shared();
    let base = data_dir();
    let (lake, state) = (base.path().join("lake"), base.path().join("state"));
    let agent = Agent::start(&config(&lake, &state), &[]);
    let bus = unique_bus(1);
    kmsg(&xid_line(&bus, 79));
    let logged = Instant::now();
    // The design bound is one second (xid_max_file_age_ms); five leave room for a busy machine.
    while xid_rows(&lake, &bus).is_empty() && logged.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        xid_rows(&lake, &bus),
        vec![(79, "kmsg".to_string())],
        "not in the lake 5 s after it was logged, with the agent running:\n{}",
        agent.log()
    );
    let stopped = agent.stop();
    assert!(stopped.status.success(), "{}", stopped.log);
    assert_eq!(xid_rows(&lake, &bus).len(), 1);
}

#[test]
fn an_xid_survives_sigkill_200ms_after_it_was_logged_and_is_written_once() {
    let _shared = support::shared();
    let base = data_dir();
    let (lake, state) = (base.path().join("lake"), base.path().join("state"));
    let agent = Agent::start(&config(&lake, &state), &[]);
    let bus = unique_bus(2);
    let killed_log = log_xid_then_kill(agent, &bus, Duration::from_millis(200));
    let in_lake_at_kill = xid_rows(&lake, &bus).len();

    let agent = Agent::start(&config(&lake, &state), &[]);
    let stopped = agent.stop();
    assert!(stopped.status.success(), "{}", stopped.log);
    assert_eq!(
        xid_rows(&lake, &bus),
        vec![(79, "kmsg".to_string())],
        "in the lake at the kill: {in_lake_at_kill}\nfirst run:\n{killed_log}\nsecond run:\n{}",
        stopped.log
    );
}

#[test]
fn an_xid_logged_while_the_agent_was_down_is_read_at_the_next_start_once() {
    let _shared = support::shared();
    let base = data_dir();
    let (lake, state) = (base.path().join("lake"), base.path().join("state"));
    let bus = unique_bus(3);
    // A first run leaves a cursor.
    let first = Agent::start(&config(&lake, &state), &[]).stop();
    assert!(first.status.success(), "{}", first.log);
    assert!(state.join("kmsg-cursor.json").is_file(), "{}", first.log);

    kmsg(&xid_line(&bus, 48));
    let second = Agent::start(&config(&lake, &state), &[]);
    second.wait_for_log(&format!("pci_bus_id={bus}"), Duration::from_secs(10));
    let second = second.stop();
    assert!(second.status.success(), "{}", second.log);
    assert_eq!(xid_rows(&lake, &bus), vec![(48, "kmsg".to_string())]);

    // A third run does not read it again.
    let third = Agent::start(&config(&lake, &state), &[]).stop();
    assert!(third.status.success(), "{}", third.log);
    assert!(
        !third.log.contains(&format!("pci_bus_id={bus}")),
        "{}",
        third.log
    );
    assert_eq!(xid_rows(&lake, &bus).len(), 1);
}

#[test]
fn an_xid_journaled_before_the_cursor_was_saved_is_not_read_twice() {
    let _shared = support::shared();
    let base = data_dir();
    let (lake, state) = (base.path().join("lake"), base.path().join("state"));
    // The lake is unavailable (a file holds its name): the XID stays in the journal.
    std::fs::write(&lake, b"not a directory").unwrap();
    let agent = Agent::start(&config(&lake, &state), &[]);
    let bus = unique_bus(4);
    let killed_log = log_xid_then_kill(agent, &bus, Duration::from_millis(300));
    // A kill between the journal's fsync and the cursor's: the cursor is still before the XID.
    let cursor_path = state.join("kmsg-cursor.json");
    let mut cursor: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&cursor_path).unwrap()).unwrap();
    let seq = cursor["seq"].as_u64().unwrap();
    cursor["seq"] = seq.saturating_sub(50).into();
    std::fs::write(&cursor_path, cursor.to_string()).unwrap();

    std::fs::remove_file(&lake).unwrap();
    let agent = Agent::start(&config(&lake, &state), &[]);
    let stopped = agent.stop();
    assert!(stopped.status.success(), "{}", stopped.log);
    assert_eq!(
        xid_rows(&lake, &bus),
        vec![(79, "kmsg".to_string())],
        "first run:\n{killed_log}\nsecond run:\n{}",
        stopped.log
    );
}
