//! The self-metrics endpoint as Prometheus and a probe see it during a run: `/health` says the
//! agent runs, and every `/metrics` scrape parses and satisfies the accounting identities.

mod common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::agent::{data_dir, Agent};
use common::Fixtures;

fn http(address: &str, request: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(address).expect("connect to metrics");
    stream.write_all(request.as_bytes()).unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = response.split("\r\n\r\n").nth(1).unwrap_or("").to_string();
    (status, body)
}

/// `name{labels}` -> value.
fn scrape(address: &str) -> BTreeMap<String, u64> {
    let (status, body) = http(address, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(status, 200);
    body.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (series, value) = l.rsplit_once(' ').expect("sample line");
            (
                series.to_string(),
                value.parse().unwrap_or_else(|_| panic!("bad value in {l}")),
            )
        })
        .collect()
}

fn get(samples: &BTreeMap<String, u64>, series: &str) -> u64 {
    *samples
        .get(series)
        .unwrap_or_else(|| panic!("no series {series}"))
}

#[test]
fn scrapes_during_a_run_satisfy_the_identities() {
    let fixtures = Fixtures::build();
    let data = data_dir();
    let agent = Agent::start(&fixtures.cuda_config(data.path(), r#"["default"]"#), &[]);
    let address = agent.metrics_address();
    assert_eq!(
        http(&address, "GET /health HTTP/1.1\r\n\r\n"),
        (200, "ok\n".to_string())
    );
    assert_eq!(http(&address, "GET /nope HTTP/1.1\r\n\r\n").0, 404);
    assert_eq!(http(&address, "POST /metrics HTTP/1.1\r\n\r\n").0, 405);

    let mut workload = fixtures
        .workload(&["launches", "0", "20000"])
        .spawn()
        .expect("workload");
    let sink = "component_id=\"parquet\",component_kind=\"sink\",kind=\"cuda\"";
    let mut previous = 0;
    for _ in 0..4 {
        std::thread::sleep(Duration::from_millis(400));
        let m = scrape(&address);
        let ring = |name: &str| get(&m, &format!("{name}{{ring=\"cuda\"}}"));
        assert_eq!(
            ring("gpuship_kernel_emitted_events_total"),
            ring("gpuship_ring_received_events_total")
                + ring("gpuship_kernel_lost_events_total")
                + ring("gpuship_ring_pending_events"),
            "{m:?}"
        );
        let received = get(
            &m,
            &format!("gpuship_component_received_events_total{{{sink}}}"),
        );
        let discarded: u64 = m
            .iter()
            .filter(|(k, _)| {
                k.starts_with("gpuship_component_discarded_events_total")
                    && k.contains("kind=\"cuda\"")
            })
            .map(|(_, v)| v)
            .sum();
        assert_eq!(
            received,
            get(
                &m,
                &format!("gpuship_component_sent_events_total{{{sink}}}")
            ) + discarded
                + get(
                    &m,
                    &format!("gpuship_component_failed_events_total{{{sink}}}")
                )
                + get(&m, &format!("gpuship_component_in_flight_events{{{sink}}}")),
        );
        assert!(received >= previous, "counters only grow");
        previous = received;
    }
    assert!(previous > 0, "the scrapes saw the stream");
    let stopped = agent.stop();
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(workload.id() as i32, libc::SIGTERM) };
    workload.wait().unwrap();
    assert!(stopped.assert_nothing_lost("cuda", "cuda") >= previous);
}
