//! Backpressure with a deliberately slow sink (`blackhole` with a delay): each `when_full`
//! policy behaves as documented and is counted by reason, the identities hold exactly, and
//! XIDs arrive during a CUDA burst that overwhelms the pipeline. The policies apply when memory
//! and spool are both full, or without a spool: these sinks have none (with one, a full queue
//! spills instead; `tests/outage_load.rs`).

use std::io::Write;
use std::time::Duration;

use crate::support;
use crate::support::agent::Agent;
use crate::support::Fixtures;

fn config(fixtures: &Fixtures, ring_mib: u32, kmsg: bool, when_full: &str) -> String {
    format!(
        "[agent]\nprogress_interval_secs = 1\n\n[sources.xid]\ntracepoint = false\nkmsg = {kmsg}\n\n\
         [sources.cuda]\nlibraries = [\"{}\"]\nfunctions = [\"default\"]\nstats = []\ndrain_interval_ms = 20\nring_size_mib = {ring_mib}\n\n\
         [batch]\nmax_events = 2000\ntimeout_ms = 50\n\n\
         [[sinks]]\ntype = \"blackhole\"\ndelay_ms = 40\n[sinks.buffer]\nmax_events = 4000\nwhen_full = \"{when_full}\"\n\
         [sinks.spool]\nenabled = false\n",
        fixtures.libcuda.display()
    )
}

fn u(v: &serde_json::Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

fn run_policy(when_full: &str) -> support::agent::Stopped {
    let fixtures = Fixtures::build();
    let agent = Agent::start(&config(&fixtures, 16, false, when_full), &[]);
    let (_, stdout) = fixtures.run_workload(&["threads", "2", "20000"], &[]);
    assert_eq!(stdout.trim(), "workload: threads calls=80000");
    let stopped = agent.stop();
    assert!(stopped.status.success(), "{}", stopped.log);
    stopped
}

#[test]
fn drop_newest_drops_and_counts_instead_of_slowing_capture() {
    let _shared = support::shared();
    let stopped = run_policy("drop_newest");
    let ring = stopped.ring("cuda");
    let sink = stopped.sink("cuda");
    assert_eq!(u(&ring["emitted"]), 80_000);
    assert_eq!(
        u(&ring["lost_in_kernel"]),
        0,
        "a dropping sink never holds the pipeline back"
    );
    assert_eq!(u(&sink["received"]), 80_000);
    let dropped = u(&sink["dropped_by_reason"]["buffer_full"]);
    assert!(dropped > 0, "{}", stopped.outcome);
    assert_eq!(u(&sink["dropped"]), dropped);
    assert_eq!(
        u(&sink["delivered"]) + dropped,
        80_000,
        "{}",
        stopped.outcome
    );
    assert_eq!(u(&sink["in_flight"]), 0);
}

#[test]
fn drop_oldest_drops_and_counts_the_oldest() {
    let _shared = support::shared();
    let stopped = run_policy("drop_oldest");
    let sink = stopped.sink("cuda");
    let dropped = u(&sink["dropped_by_reason"]["buffer_full"]);
    assert!(dropped > 0, "{}", stopped.outcome);
    assert_eq!(u(&stopped.ring("cuda")["lost_in_kernel"]), 0);
    assert_eq!(
        u(&sink["delivered"]) + dropped,
        80_000,
        "{}",
        stopped.outcome
    );
}

#[test]
fn block_moves_the_loss_to_the_kernel_ring_and_xids_still_arrive() {
    let _alone = support::exclusive();
    let fixtures = Fixtures::build();
    // A 1 MiB ring fills quickly while the slow sink holds the pipeline back.
    let agent = Agent::start(&config(&fixtures, 1, true, "block"), &[]);
    let mut burst = fixtures
        .workload(&["threads", "4", "60000"])
        .spawn()
        .expect("workload");
    std::thread::sleep(Duration::from_millis(300));
    let mut kmsg = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/kmsg")
        .expect("/dev/kmsg");
    for code in [13, 31, 43, 45, 79] {
        // One write(2) per record: /dev/kmsg makes a record of every write.
        let line = format!("<4>NVRM: Xid (PCI:0000:b7:00): {code}, pid=4242, name=burst, injected during the burst\n");
        kmsg.write_all(line.as_bytes()).unwrap();
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(burst.wait().unwrap().success());
    let stopped = agent.stop();
    assert!(stopped.status.success(), "{}", stopped.log);

    let ring = stopped.ring("cuda");
    let (emitted, received, lost) = (
        u(&ring["emitted"]),
        u(&ring["received"]),
        u(&ring["lost_in_kernel"]),
    );
    assert_eq!(emitted, 480_000, "every call was counted by the probes");
    assert_eq!(emitted, received + lost, "{}", stopped.outcome);
    assert!(
        lost > 0,
        "the burst overwhelmed the pipeline: {}",
        stopped.outcome
    );
    let sink = stopped.sink("cuda");
    assert_eq!(u(&sink["dropped"]), 0, "block never drops in the agent");
    assert_eq!(u(&sink["delivered"]), received, "{}", stopped.outcome);
    let xids = stopped.sink("xid");
    assert_eq!(
        (u(&xids["received"]), u(&xids["delivered"])),
        (5, 5),
        "{}",
        stopped.outcome
    );
    assert_eq!(u(&stopped.outcome["accounting"]["kmsg"]["xids"]), 5);
}

#[test]
fn a_slow_dropping_sink_does_not_slow_the_others() {
    let _shared = support::shared();
    let fixtures = Fixtures::build();
    let data = support::agent::data_dir();
    let config = config(&fixtures, 16, false, "drop_newest").replace(
        "[[sinks]]\ntype = \"blackhole\"",
        &format!(
            "[[sinks]]\nname = \"lake\"\ntype = \"parquet\"\npath = \"{}\"\n\n[[sinks]]\nname = \"slow\"\ntype = \"blackhole\"",
            data.path().display()
        ),
    );
    let agent = Agent::start(&config, &[]);
    fixtures.run_workload(&["threads", "2", "20000"], &[]);
    let stopped = agent.stop();
    assert!(stopped.status.success(), "{}", stopped.log);
    let sinks = stopped.outcome["accounting"]["sinks"]
        .as_array()
        .unwrap()
        .clone();
    let sink = |name: &str| {
        sinks
            .iter()
            .find(|s| s["sink"] == name && s["kind"] == "cuda")
            .unwrap()
            .clone()
    };
    assert_eq!(u(&stopped.ring("cuda")["lost_in_kernel"]), 0);
    let (lake, slow) = (sink("lake"), sink("slow"));
    assert_eq!(
        (u(&lake["received"]), u(&lake["delivered"])),
        (80_000, 80_000),
        "{}",
        stopped.outcome
    );
    assert!(
        u(&slow["dropped_by_reason"]["buffer_full"]) > 0,
        "{}",
        stopped.outcome
    );
    assert_eq!(u(&slow["delivered"]) + u(&slow["dropped"]), 80_000);
    let rows: usize = support::lake::read_table(data.path(), "cuda")
        .iter()
        .map(|b| b.num_rows())
        .sum();
    assert_eq!(rows, 80_000);
}
