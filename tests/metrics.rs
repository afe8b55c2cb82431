//! The self-metrics endpoint as Prometheus and a probe see it during a run: `/health` says the
//! agent runs, and every `/metrics` scrape parses and satisfies the accounting identities.

use std::process::Command;
use std::time::Duration;

use crate::support;
use crate::support::agent::{binary, data_dir, Agent};
use crate::support::metrics::{get, http, scrape};
use crate::support::Fixtures;

#[test]
fn scrapes_during_a_run_satisfy_the_identities() {
    let _shared = support::shared();
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

#[test]
fn a_metrics_port_in_use_is_a_start_error_unless_metrics_are_off() {
    let _shared = support::shared();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let address = taken.local_addr().unwrap().to_string();
    let dir = data_dir();
    let config = |enabled: bool| {
        format!(
            "[agent]\nstate_dir = \"{}\"\n[sources.xid]\ntracepoint = false\nkmsg = true\n\
             [sources.cuda]\nenabled = false\n[metrics]\nenabled = {enabled}\naddress = \"{address}\"\n\
             [[sinks]]\ntype = \"blackhole\"\n",
            dir.path().join("state").display()
        )
    };
    let path = dir.path().join("gpuship.toml");
    let run = |config: String| {
        std::fs::write(&path, config).unwrap();
        Command::new(binary())
            .args(["run", "--config"])
            .arg(&path)
            .args(["--", "true"])
            .env("NO_COLOR", "1")
            .output()
            .expect("run gpuship")
    };
    let output = run(config(true));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("cannot serve metrics on {address}"))
            && stderr.contains("Address already in use"),
        "{stderr}"
    );
    assert!(!stderr.contains("capture started"), "{stderr}");

    let output = run(config(false));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("capture started"), "{stderr}");

    // The connection limit has a range that `validate` enforces.
    let text = config(true).replace("[metrics]\n", "[metrics]\nmax_connections = 0\n");
    std::fs::write(&path, text).unwrap();
    let output = Command::new(binary())
        .args(["validate", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("metrics.max_connections: 0 is outside 1..=1024"),
        "{stderr}"
    );
}
