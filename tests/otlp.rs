//! The OTLP sink against a real collector (rotel, started here on free ports, printing every
//! record it receives), over gRPC and over HTTP: every delivered event appears with the right
//! event name, severity, body, attributes and resource, and the counts match the accounting;
//! a collector killed and restarted, or absent at start, loses nothing.

use std::time::{Duration, Instant};

use crate::support;
use crate::support::agent::Agent;
use crate::support::kmsg;
use crate::support::metrics::scrape;
use crate::support::peers::{free_port, PrintedRecord, Rotel};
use crate::support::Fixtures;

fn metric(address: &str, series: &str) -> u64 {
    scrape(address).get(series).copied().unwrap_or(0)
}

fn wait_until(what: &str, agent: &Agent, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(Instant::now() < deadline, "{what}:\n{}", agent.log());
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn agent_config(fixtures: &Fixtures, kmsg: bool) -> String {
    format!(
        "[agent]\nprogress_interval_secs = 1\nhost_name = \"node-o\"\n\n\
         [sources.xid]\ntracepoint = false\nkmsg = {kmsg}\n\n\
         [sources.cuda]\nlibraries = [\"{}\"]\nfunctions = [\"default\"]\nstats = []\ndrain_interval_ms = 20\n\n\
         [batch]\ntimeout_ms = 100\n",
        fixtures.libcuda.display()
    )
}

fn from_sink<'a>(records: &'a [PrintedRecord], sink: &str) -> Vec<&'a PrintedRecord> {
    let tag = format!("Str({sink})");
    records
        .iter()
        .filter(|r| r.resource.get("gpuship.sink") == Some(&tag))
        .collect()
}

#[test]
fn xids_and_failed_calls_reach_the_collector_over_grpc_and_http() {
    let _alone = support::exclusive();
    let rotel = Rotel::start(0, 0);
    let fixtures = Fixtures::build();
    let mut config = agent_config(&fixtures, true);
    for (name, protocol, port) in [
        ("grpc", "grpc", rotel.grpc_port),
        ("http", "http/protobuf", rotel.http_port),
    ] {
        config += &format!(
            "\n[[sinks]]\ntype = \"otlp\"\nname = \"{name}\"\nendpoint = \"http://127.0.0.1:{port}\"\n\
             protocol = \"{protocol}\"\nresource_attributes = {{ \"gpuship.sink\" = \"{name}\" }}\n"
        );
    }
    let agent = Agent::start(&config, &[]);
    kmsg("<3>NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, GPU has fallen off the bus.");
    kmsg("<4>NVRM: Xid (PCI:0000:86:00): 31, pid=468, name=trainer, MMU Fault: ENGINE GRAPHICS faulted @ 0x7f00_00000000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_WRITE");
    let (pid, _) = fixtures.run_workload(
        &["sequence", "2"],
        &[("FAKE_CUDA_RESULTS", "cuCtxSynchronize=700")],
    );
    agent.wait_for_log("code=31", Duration::from_secs(10));
    // 2 XIDs and 4 failed calls per sink.
    let records = rotel.wait_for_records(12, Duration::from_secs(20));
    let stopped = agent.stop();
    assert!(stopped.status.success(), "{}", stopped.log);

    for name in ["grpc", "http"] {
        let xid = stopped.sink_named(name, "xid");
        assert_eq!(
            (xid["received"].as_u64(), xid["delivered"].as_u64()),
            (Some(2), Some(2)),
            "{xid}"
        );
        // The OTLP default: failed CUDA calls only (2 iterations x 2 failing calls of 28).
        let cuda = stopped.sink_named(name, "cuda");
        assert_eq!(cuda["received"], 4, "{cuda}");
        assert_eq!(cuda["delivered"], 4, "{cuda}");
        assert_eq!(cuda["filtered"], 52, "{cuda}");
        assert_eq!(cuda["in_flight"], 0, "{cuda}");

        let printed = from_sink(&records, name);
        assert_eq!(printed.len(), 6, "{name}: {printed:#?}");
        for record in &printed {
            assert_eq!(record.resource["service.name"], "Str(gpuship)");
            assert_eq!(record.resource["host.name"], "Str(node-o)");
            assert!(record.resource.contains_key("service.version"));
            assert!(record.resource.contains_key("host.boot.id"));
            assert!(record.observed_unix_nano >= record.time_unix_nano);
        }
        let xids: Vec<_> = printed
            .iter()
            .filter(|r| r.event_name == "gpu.xid")
            .collect();
        assert_eq!(xids.len(), 2);
        let fell_off = xids
            .iter()
            .find(|r| r.attributes["gpu.xid.code"] == "Int(79)")
            .expect("XID 79");
        // Severity from the XID catalog: 79 is fatal.
        assert_eq!(fell_off.severity_number, 21);
        assert_eq!(fell_off.severity_text, "FATAL");
        assert_eq!(
            fell_off.attributes["gpu.xid.name"],
            "Str(GPU fell off the PCIe bus)"
        );
        assert_eq!(fell_off.attributes["gpu.xid.action"], "Str(reboot_node)");
        assert_eq!(fell_off.attributes["gpu.xid.root_candidate"], "Bool(true)");
        assert_eq!(
            fell_off.attributes["gpu.xid.incident_id"],
            format!("Str(node-o/0000:3b:00.0/{})", fell_off.time_unix_nano)
        );
        let fault = xids
            .iter()
            .find(|r| r.attributes["gpu.xid.code"] == "Int(31)")
            .expect("XID 31");
        assert_eq!(fault.severity_number, 17);
        assert_eq!(fault.attributes["gpu.xid.fault.engine"], "Str(GRAPHICS)");
        assert_eq!(
            fell_off.body,
            "Str(XID 79 on GPU 0000:3b:00.0: GPU has fallen off the bus.)"
        );
        assert_eq!(fell_off.attributes["gpu.pci_bus_id"], "Str(0000:3b:00.0)");
        assert_eq!(fell_off.attributes["process.pid"], "Int(1234)");
        assert_eq!(
            fell_off.attributes["process.executable.name"],
            "Str(python3)"
        );
        assert_eq!(fell_off.attributes["gpu.xid.source"], "Str(kmsg)");
        assert_eq!(
            fell_off.attributes["gpu.xid.message_truncated"],
            "Bool(false)"
        );

        let calls: Vec<_> = printed
            .iter()
            .filter(|r| r.event_name == "cuda.call")
            .collect();
        assert_eq!(calls.len(), 4);
        let mut errors: Vec<&str> = calls
            .iter()
            .map(|r| r.attributes["error.type"].as_str())
            .collect();
        errors.sort_unstable();
        assert_eq!(
            errors,
            [
                "Str(CUDA_ERROR_ILLEGAL_ADDRESS)",
                "Str(CUDA_ERROR_ILLEGAL_ADDRESS)",
                "Str(CUDA_ERROR_OUT_OF_MEMORY)",
                "Str(CUDA_ERROR_OUT_OF_MEMORY)"
            ]
        );
        for call in &calls {
            assert_eq!(call.severity_number, 17);
            assert_eq!(call.attributes["process.pid"], format!("Int({pid})"));
            assert_eq!(
                call.attributes["process.executable.name"],
                "Str(cuda_workload)"
            );
            assert!(call.body.contains(" returned CUDA_ERROR_"), "{}", call.body);
        }
    }
}

const HEALTHY: &str = "gpuship_sink_healthy{component_id=\"otlp\",component_kind=\"sink\"}";
const SENT: &str =
    "gpuship_component_sent_events_total{component_id=\"otlp\",component_kind=\"sink\",kind=\"cuda\"}";

#[test]
fn a_collector_killed_mid_stream_and_restarted_loses_nothing() {
    let _shared = support::shared();
    let mut rotel = Rotel::start(0, 0);
    let (grpc, http) = (rotel.grpc_port, rotel.http_port);
    let fixtures = Fixtures::build();
    let config = agent_config(&fixtures, false)
        + &format!(
            "\n[[sinks]]\ntype = \"otlp\"\nendpoint = \"http://127.0.0.1:{grpc}\"\n\
             timeout_secs = 2\ncuda_filter = {{ all = true }}\n"
        );
    let agent = Agent::start(&config, &[]);
    let address = agent.metrics_address();
    let mut workload = fixtures
        .workload(&["launches", "20000", "400000"])
        .spawn()
        .expect("workload");
    wait_until("nothing delivered", &agent, || metric(&address, SENT) > 0);
    rotel.peer.kill();
    wait_until("the sink never noticed the outage", &agent, || {
        metric(&address, HEALTHY) == 0
    });
    let rotel = Rotel::start(grpc, http);
    wait_until("the sink never recovered", &agent, || {
        metric(&address, HEALTHY) == 1
    });
    assert!(workload.wait().unwrap().success());
    std::thread::sleep(Duration::from_millis(500));
    let stopped = agent.stop();
    assert!(stopped.status.success(), "{}", stopped.log);
    assert_eq!(stopped.assert_nothing_lost("cuda", "cuda"), 20_000);
    let errors = &stopped.outcome["accounting"]["sink_health"][0]["errors"];
    assert!(
        errors
            .as_object()
            .is_some_and(|e| e.keys().any(|k| k.starts_with("grpc_"))),
        "{errors}"
    );
    // The restarted collector printed what arrived after it came back, all from the workload.
    let after = rotel.records();
    assert!(!after.is_empty());
    assert!(after
        .iter()
        .all(|r| r.event_name == "cuda.call"
            && r.attributes["cuda.function"] == "Str(cuLaunchKernel)"));
}

#[test]
fn an_absent_collector_at_start_means_spooling_until_it_appears() {
    let _shared = support::shared();
    let (grpc, http) = (free_port(), free_port());
    let fixtures = Fixtures::build();
    let config = agent_config(&fixtures, false)
        + &format!(
            "\n[[sinks]]\ntype = \"otlp\"\nendpoint = \"http://127.0.0.1:{http}\"\n\
             protocol = \"http/protobuf\"\ntimeout_secs = 2\ncuda_filter = {{ all = true }}\n\
             [sinks.buffer]\nmax_events = 10\n"
        );
    let agent = Agent::start(&config, &[]);
    let address = agent.metrics_address();
    fixtures.run_workload(&["sequence", "1"], &[]);
    wait_until("the sink never reported the failure", &agent, || {
        metric(&address, HEALTHY) == 0
    });
    // More calls while the collector is away: beyond the 10-event queue, they are spooled.
    fixtures.run_workload(&["sequence", "1"], &[]);
    let spooled = "gpuship_component_spooled_events_total{component_id=\"otlp\",component_kind=\"sink\",kind=\"cuda\"}";
    wait_until("nothing was spooled", &agent, || {
        metric(&address, spooled) > 0
    });
    assert_eq!(metric(&address, SENT), 0);
    let rotel = Rotel::start(grpc, http);
    wait_until("the sink never delivered", &agent, || {
        metric(&address, SENT) == 56
    });
    assert_eq!(metric(&address, HEALTHY), 1);
    let stopped = agent.stop();
    assert!(stopped.status.success(), "{}", stopped.log);
    let cuda = stopped.sink("cuda");
    assert_eq!(cuda["delivered"], 56, "{cuda}");
    assert_eq!(cuda["spooled_pending"], 0, "{cuda}");
    assert_eq!(cuda["in_flight"], 0, "{cuda}");
    assert!(cuda["replayed"].as_u64().unwrap() > 0, "{cuda}");
    let records = rotel.wait_for_records(56, Duration::from_secs(10));
    assert_eq!(records.len(), 56);
}
