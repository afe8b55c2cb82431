//! A sink's destination fails mid-stream and comes back: what it could not take goes to the
//! disk spool and is replayed; nothing is lost and the identities hold. And events spooled at
//! shutdown are delivered by the next run.

use std::time::Duration;

use crate::support;
use crate::support::agent::{data_dir, Agent};
use crate::support::lake::read_table;
use crate::support::metrics::{get, scrape};
use crate::support::Fixtures;

fn metric(address: &str, series: &str) -> u64 {
    get(&scrape(address), series)
}

fn rows(root: &std::path::Path) -> usize {
    read_table(root, "cuda").iter().map(|b| b.num_rows()).sum()
}

const SINK: &str = "component_id=\"parquet\",component_kind=\"sink\",kind=\"cuda\"";

#[test]
fn a_destination_outage_spools_then_replays_without_loss() {
    let _shared = support::shared();
    let fixtures = Fixtures::build();
    let base = data_dir();
    let lake = base.path().join("lake");
    let config = fixtures.cuda_config(&lake, r#"["default"]"#).replace(
        "type = \"parquet\"\n",
        "type = \"parquet\"\nmax_file_rows = 3000\nmax_file_age_secs = 1\n",
    ) + "\n[sinks.buffer]\nmax_events = 4000\n";
    let agent = Agent::start(&config, &[]);
    let address = agent.metrics_address();
    let mut workload = fixtures
        .workload(&["launches", "0", "20000"])
        .spawn()
        .expect("workload");
    std::thread::sleep(Duration::from_millis(800));

    // Outage: the lake folder disappears and a file takes its name.
    let moved = base.path().join("lake.before-outage");
    std::fs::rename(&lake, &moved).unwrap();
    std::fs::write(&lake, b"not a directory").unwrap();
    support::wait_until(
        Duration::from_secs(20),
        "nothing was spooled during the outage",
        || {
            metric(
                &address,
                &format!("gpuship_component_spooled_events_total{{{SINK}}}"),
            ) > 0
        },
        || agent.log(),
    );
    std::thread::sleep(Duration::from_millis(500));

    // Recovery.
    std::fs::remove_file(&lake).unwrap();
    support::wait_until(
        Duration::from_secs(40),
        "the spool was not replayed",
        || metric(&address, &format!("gpuship_spool_events{{{SINK}}}")) == 0,
        || agent.log(),
    );
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(workload.id() as i32, libc::SIGTERM) };
    workload.wait().unwrap();
    let stopped = agent.stop();
    assert!(stopped.status.success(), "{}", stopped.log);
    let delivered = stopped.assert_nothing_lost("cuda", "cuda");
    let sink = stopped.sink("cuda");
    assert!(sink["spooled"].as_u64().unwrap() > 0, "{}", stopped.outcome);
    assert_eq!(sink["spooled"], sink["replayed"]);
    assert_eq!(sink["spooled_pending"], 0);
    assert!(
        stopped.log.contains("sink failing") && stopped.log.contains("sink recovered"),
        "{}",
        stopped.log
    );
    // Every delivered row is in exactly one complete file, before or after the outage.
    assert_eq!((rows(&moved) + rows(&lake)) as u64, delivered);
}

#[test]
fn events_spooled_at_shutdown_are_delivered_by_the_next_run() {
    let _shared = support::shared();
    let fixtures = Fixtures::build();
    let base = data_dir();
    let state = base.path().join("state");
    let blocked = base.path().join("blocked");
    std::fs::write(&blocked, b"a file where the lake should be").unwrap();
    let with_state = |config: String| {
        config.replacen(
            "[agent]\n",
            &format!(
                "[agent]\nstate_dir = \"{}\"\nshutdown_timeout_secs = 1\n",
                state.display()
            ),
            1,
        )
    };

    // First run: the destination never works; at the deadline everything is spooled.
    let agent = Agent::start(
        &with_state(fixtures.cuda_config(&blocked, r#"["default"]"#)),
        &[],
    );
    fixtures.run_workload(&["sequence", "1"], &[]);
    std::thread::sleep(Duration::from_millis(300));
    let first = agent.stop();
    assert!(first.status.success(), "{}", first.log);
    let sink = first.sink("cuda");
    assert_eq!(sink["received"], 28);
    assert_eq!(sink["delivered"], 0);
    assert_eq!(sink["spooled_pending"], 28, "{}", first.outcome);
    assert_eq!(sink["in_flight"], 0);
    assert!(first.log.contains("shutdown timeout"), "{}", first.log);

    // Second run, destination fixed: the spooled calls arrive without any new workload.
    let lake = base.path().join("lake");
    let agent = Agent::start(
        &with_state(fixtures.cuda_config(&lake, r#"["default"]"#)),
        &[],
    );
    std::thread::sleep(Duration::from_millis(500));
    let second = agent.stop();
    let sink = second.sink("cuda");
    assert_eq!(
        (
            sink["received"].as_u64(),
            sink["delivered"].as_u64(),
            sink["replayed"].as_u64()
        ),
        (Some(28), Some(28), Some(28)),
        "{}",
        second.outcome
    );
    assert_eq!(sink["spooled_pending"], 0);
    assert_eq!(rows(&lake), 28);
}
