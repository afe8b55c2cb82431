//! "Stalled" is an overdue acknowledgement, never ordinary activity: an XID followed by 40 s
//! of CUDA activity into a Parquet sink whose files stay open for 300 s keeps `/health` at 200
//! and `gpuship_sink_healthy` at 1 throughout, and a clean run logs no stall; an OTLP collector
//! that stops answering (SIGSTOP) makes its sink unhealthy within the stall timeout.

use std::time::{Duration, Instant};

use crate::support;
use crate::support::agent::{data_dir, Agent};
use crate::support::lake::read_table;
use crate::support::metrics::{get, http, scrape};
use crate::support::peers::Rotel;
use crate::support::Fixtures;

fn health(address: &str) -> u16 {
    http(address, "GET /health HTTP/1.0\r\n\r\n").0
}

fn xid_line(code: u32) -> String {
    format!("<4>NVRM: Xid (PCI:0000:c1:00): {code}, pid=4242, name=stall_test, channel 0x0000000a")
}

/// The XID and CUDA sources on the stand-in libcuda, batches every 100 ms.
fn sources(fixtures: &Fixtures) -> String {
    format!(
        "[agent]\nprogress_interval_secs = 1\n\n\
         [sources.xid]\ntracepoint = false\nkmsg = true\n\n\
         [sources.cuda]\nlibraries = [\"{}\"]\nfunctions = [\"default\"]\nstats = []\ndrain_interval_ms = 20\n\n\
         [batch]\ntimeout_ms = 100\n",
        fixtures.libcuda.display()
    )
}

#[test]
fn an_xid_then_forty_seconds_of_cuda_activity_keep_a_parquet_sink_healthy() {
    let _alone = support::exclusive();
    let fixtures = Fixtures::build();
    let base = data_dir();
    let lake = base.path().join("lake");
    let config = sources(&fixtures)
        + &format!(
            "\n[[sinks]]\ntype = \"parquet\"\npath = \"{}\"\nmax_file_age_secs = 300\n",
            lake.display()
        );
    let agent = Agent::start(&config, &[]);
    let address = agent.metrics_address();
    let healthy = "gpuship_sink_healthy{component_id=\"parquet\",component_kind=\"sink\"}";
    let xids = "gpuship_component_sent_events_total{component_id=\"parquet\",component_kind=\"sink\",kind=\"xid\"}";
    // Calls in bursts with pauses longer than the stall timeout (2 s) between some of them:
    // 1,000 launches, then 2.5 s asleep, over and over, until SIGTERM.
    let mut workload = fixtures
        .workload(&["launches", "0", "2500000"])
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("workload");
    std::thread::sleep(Duration::from_millis(500));
    support::kmsg(&xid_line(79));
    let start = Instant::now();
    let mut polls = 0;
    while start.elapsed() < Duration::from_secs(40) {
        let status = health(&address);
        let samples = scrape(&address);
        assert_eq!(
            (status, get(&samples, healthy)),
            (200, 1),
            "after {:?}:\n{}",
            start.elapsed(),
            agent.log()
        );
        polls += 1;
        std::thread::sleep(Duration::from_millis(500));
    }
    assert!(polls >= 60, "{polls} polls");
    assert!(get(&scrape(&address), xids) >= 1, "{}", agent.log());
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(workload.id() as i32, libc::SIGTERM) };
    workload.wait().unwrap();
    let stopped = agent.stop();
    assert!(stopped.status.success(), "{}", stopped.log);
    assert!(!stopped.log.contains("stalled"), "{}", stopped.log);
    let xid = stopped.sink("xid");
    assert_eq!(xid["delivered"], xid["received"], "{}", stopped.outcome);
    stopped.assert_nothing_lost("cuda", "cuda");
    // Exactly our XID in the lake (other tests on this machine may log XIDs of their own).
    assert_eq!(xids_named(&lake, "stall_test"), 1);
}

/// XID rows in the lake whose process name is `comm`.
fn xids_named(lake: &std::path::Path, comm: &str) -> usize {
    use arrow_array::cast::AsArray;
    use arrow_array::Array;
    read_table(lake, "xid")
        .iter()
        .map(|batch| {
            let column = batch.column_by_name("comm").expect("comm column");
            let names = column.as_string::<i32>();
            (0..names.len())
                .filter(|&i| !names.is_null(i) && names.value(i) == comm)
                .count()
        })
        .sum()
}

#[test]
fn a_collector_that_stops_answering_makes_its_sink_unhealthy_within_the_stall_timeout() {
    let _alone = support::exclusive();
    let rotel = Rotel::start(0, 0);
    let fixtures = Fixtures::build();
    let config = sources(&fixtures)
        + &format!(
            "\n[[sinks]]\ntype = \"otlp\"\nendpoint = \"http://127.0.0.1:{}\"\ntimeout_secs = 60\n\n\
             [sinks.buffer]\nstall_timeout_ms = 1000\n",
            rotel.grpc_port
        );
    let agent = Agent::start(&config, &[]);
    let address = agent.metrics_address();
    let healthy = "gpuship_sink_healthy{component_id=\"otlp\",component_kind=\"sink\"}";
    let xids = "gpuship_component_sent_events_total{component_id=\"otlp\",component_kind=\"sink\",kind=\"xid\"}";
    let mut workload = fixtures
        .workload(&["launches", "0", "20000"])
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("workload");
    // Healthy while the collector answers: an XID goes through.
    support::kmsg(&xid_line(79));
    support::wait_until(
        Duration::from_secs(20),
        "the first XID was not delivered",
        || get(&scrape(&address), xids) >= 1,
        || agent.log(),
    );
    assert_eq!(health(&address), 200, "{}", agent.log());
    // The collector hangs: connections stay open, nothing is answered.
    rotel.peer.pause();
    let before = get(&scrape(&address), xids);
    support::kmsg(&xid_line(48));
    let paused = Instant::now();
    let unhealthy = loop {
        if health(&address) == 503 && get(&scrape(&address), healthy) == 0 {
            break paused.elapsed();
        }
        assert!(
            paused.elapsed() < Duration::from_secs(10),
            "still healthy 10 s into the outage:\n{}",
            agent.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    // The stall timeout (1 s) plus the time for the XID to reach the sink and a check to run.
    assert!(unhealthy < Duration::from_millis(2500), "{unhealthy:?}");
    let (_, body) = http(&address, "GET /health HTTP/1.0\r\n\r\n");
    assert!(body.contains("otlp"), "{body}");
    // The collector answers again: the XID goes through and the sink is healthy.
    rotel.peer.resume();
    support::wait_until(
        Duration::from_secs(30),
        "the sink never recovered",
        || health(&address) == 200 && get(&scrape(&address), xids) > before,
        || agent.log(),
    );
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(workload.id() as i32, libc::SIGTERM) };
    workload.wait().unwrap();
    let stopped = agent.stop();
    assert!(stopped.status.success(), "{}", stopped.log);
    assert!(stopped.log.contains("sink stalled"), "{}", stopped.log);
    let xid = stopped.sink("xid");
    assert_eq!(xid["delivered"], xid["received"], "{}", stopped.outcome);
}
