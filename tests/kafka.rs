//! The Kafka sink against a real broker (tansu, started here on a free port): XIDs from the
//! kernel log and CUDA calls of the stand-in workload arrive once per delivered event, on the
//! right topics with the right keys and headers, decodable in every encoding; a broker killed
//! mid-stream and restarted loses nothing the agent counted as delivered.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::support;
use crate::support::agent::Agent;
use crate::support::kafka::consume_all;
use crate::support::kmsg;
use crate::support::metrics::scrape;
use crate::support::peers::Tansu;
use crate::support::Fixtures;
use arrow_array::cast::AsArray;
use arrow_array::types::UInt32Type;
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use prost::Message as _;

const XIDS: [&str; 3] = [
    "<3>NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, GPU has fallen off the bus.",
    "<4>NVRM: Xid (PCI:0000:86:00): 31, pid=468, name=python3, MMU Fault: ENGINE GRAPHICS",
    "<4>NVRM: Xid (PCI:0000:3b:00): 48, An uncorrectable double bit error (DBE) has been detected.",
];

fn otlp_records(payload: &[u8]) -> Vec<opentelemetry_proto::tonic::logs::v1::LogRecord> {
    let request = ExportLogsServiceRequest::decode(payload).expect("ExportLogsServiceRequest");
    let resource = request.resource_logs[0].resource.as_ref().unwrap();
    assert!(resource.attributes.iter().any(|kv| kv.key == "service.name"
        && kv.value.as_ref().unwrap().value == Some(Value::StringValue("gpuship".into()))));
    request
        .resource_logs
        .into_iter()
        .flat_map(|r| r.scope_logs)
        .flat_map(|s| s.log_records)
        .collect()
}

#[test]
fn xids_and_cuda_calls_arrive_once_in_every_encoding() {
    let _alone = support::exclusive();
    let tansu = Tansu::start(0);
    let brokers = tansu.brokers();
    let fixtures = Fixtures::build();
    let mut config = format!(
        "[agent]\nprogress_interval_secs = 1\nhost_name = \"node-k\"\n\n\
         [sources.xid]\ntracepoint = false\nkmsg = true\n\n\
         [sources.cuda]\nlibraries = [\"{}\"]\nfunctions = [\"default\", \"cuDriverGetVersion\", \"cuDeviceGetCount\"]\nstats = []\ndrain_interval_ms = 20\n\n\
         [batch]\ntimeout_ms = 100\n",
        fixtures.libcuda.display()
    );
    for (name, encoding) in [
        ("json", "json"),
        ("ipc", "arrow_ipc"),
        ("otlp", "otlp_proto"),
    ] {
        config += &format!(
            "\n[[sinks]]\ntype = \"kafka\"\nname = \"{name}\"\nbrokers = \"{brokers}\"\n\
             topic = \"{name}.{{kind}}\"\nencoding = \"{encoding}\"\n"
        );
    }
    let agent = Agent::start(&config, &[]);
    for line in XIDS {
        kmsg(line);
    }
    let (pid, stdout) = fixtures.run_workload(&["sequence", "2"], &[]);
    assert_eq!(stdout.trim(), "workload: sequence iterations=2 calls=60");
    agent.wait_for_log("code=48", Duration::from_secs(10));
    let stopped = agent.stop();
    assert!(stopped.status.success(), "{}", stopped.log);
    for name in ["json", "ipc", "otlp"] {
        for (kind, expected) in [("xid", 3), ("cuda", 60)] {
            let counters = stopped.sink_named(name, kind);
            assert_eq!(counters["received"], expected, "{name}/{kind}: {counters}");
            assert_eq!(counters["delivered"], expected, "{name}/{kind}: {counters}");
            assert_eq!(counters["in_flight"], 0, "{name}/{kind}: {counters}");
        }
    }

    // json: one message per event, keyed by host and GPU.
    let xids = consume_all(&brokers, "json.xid", 3);
    assert_eq!(xids.len(), 3, "exactly once");
    let mut by_code: BTreeMap<u64, &support::kafka::Record> = BTreeMap::new();
    for record in &xids {
        let event: serde_json::Value = serde_json::from_slice(&record.payload).unwrap();
        by_code.insert(event["code"].as_u64().unwrap(), record);
        assert_eq!(event["host"], "node-k");
        assert_eq!(event["source"], "kmsg");
        assert_eq!(record.headers["kind"], "xid");
        assert_eq!(record.headers["schema_version"], "7");
        assert_eq!(record.headers["host"], "node-k");
        assert_eq!(record.headers["encoding"], "json");
    }
    assert_eq!(by_code.keys().copied().collect::<Vec<_>>(), [31, 48, 79]);

    // The Kafka -> lake path of docs/rca.md: the json topic's values as lines, queried with
    // the doc's DuckDB query as written there.
    let landed = tempfile::tempdir().unwrap();
    let lines: Vec<u8> = xids
        .iter()
        .flat_map(|r| r.payload.iter().copied().chain([b'\n']))
        .collect();
    std::fs::write(landed.path().join("xid.jsonl"), lines).unwrap();
    let rows = support::lake::duckdb(&support::lake::rca_query(
        "kafka_json_xids",
        "gpuship-kafka",
        &landed.path().display().to_string(),
    ));
    let codes: Vec<(&str, &str, &str)> = rows
        .iter()
        .map(|r| (r[0].as_str(), r[4].as_str(), r[5].as_str()))
        .collect();
    assert_eq!(
        codes,
        [
            ("79", "node-k", "kmsg"),
            ("31", "node-k", "kmsg"),
            ("48", "node-k", "kmsg")
        ],
        "{rows:?}"
    );
    assert_eq!(by_code[&79].key, "node-k/0000:3b:00.0");
    assert_eq!(by_code[&48].key, "node-k/0000:3b:00.0");
    assert_eq!(by_code[&31].key, "node-k/0000:86:00.0");
    // One GPU's events share a key, hence a partition, hence their order.
    assert_eq!(by_code[&79].partition, by_code[&48].partition);
    let calls = consume_all(&brokers, "json.cuda", 60);
    assert_eq!(calls.len(), 60, "exactly once");
    let mut functions = BTreeMap::new();
    for record in &calls {
        let event: serde_json::Value = serde_json::from_slice(&record.payload).unwrap();
        assert_eq!(event["pid"], pid);
        assert_eq!(record.key, "node-k/", "CUDA rows carry no GPU yet");
        *functions
            .entry(event["function"].as_str().unwrap().to_string())
            .or_insert(0) += 1;
    }
    assert_eq!(functions.values().sum::<u32>(), 60);
    assert_eq!(functions["cuMemAlloc_v2"], 2 * 2, "{functions:?}");

    // arrow_ipc: batches that read back with the same rows.
    let mut ipc_rows = BTreeMap::new();
    for (kind, expected) in [("xid", 3), ("cuda", 60)] {
        let messages = consume_all(&brokers, &format!("ipc.{kind}"), 1);
        let mut rows = 0;
        for message in &messages {
            assert_eq!(message.headers["encoding"], "arrow_ipc");
            let reader =
                arrow_ipc::reader::StreamReader::try_new(message.payload.as_slice(), None).unwrap();
            for batch in reader {
                let batch = batch.unwrap();
                rows += batch.num_rows();
                if kind == "xid" {
                    let codes = batch
                        .column_by_name("code")
                        .unwrap()
                        .as_primitive::<UInt32Type>();
                    let bus = batch
                        .column_by_name("pci_bus_id")
                        .unwrap()
                        .as_string::<i32>();
                    for i in 0..batch.num_rows() {
                        assert_eq!(message.key, format!("node-k/{}", bus.value(i)));
                        ipc_rows.insert(codes.value(i), bus.value(i).to_string());
                    }
                }
            }
        }
        assert_eq!(rows, expected, "{kind} rows in arrow_ipc");
    }
    assert_eq!(ipc_rows[&79], "0000:3b:00.0");
    assert_eq!(ipc_rows[&31], "0000:86:00.0");

    // otlp_proto: ExportLogsServiceRequests an OpenTelemetry collector's Kafka receiver reads.
    let xid_records: Vec<_> = consume_all(&brokers, "otlp.xid", 1)
        .iter()
        .flat_map(|m| otlp_records(&m.payload))
        .collect();
    assert_eq!(xid_records.len(), 3);
    assert!(xid_records.iter().all(|r| r.event_name == "gpu.xid"));
    // Severities from the XID catalog: 31 is an error, 48 and 79 are fatal.
    let mut severities: Vec<i32> = xid_records.iter().map(|r| r.severity_number).collect();
    severities.sort_unstable();
    assert_eq!(severities, [17, 21, 21]);
    let cuda_records: Vec<_> = consume_all(&brokers, "otlp.cuda", 1)
        .iter()
        .flat_map(|m| otlp_records(&m.payload))
        .collect();
    assert_eq!(cuda_records.len(), 60);
    assert!(cuda_records.iter().all(|r| r.event_name == "cuda.call"));
}

fn metric(address: &str, series: &str) -> u64 {
    scrape(address).get(series).copied().unwrap_or(0)
}

#[test]
fn a_broker_killed_mid_stream_and_restarted_loses_nothing() {
    let _shared = support::shared();
    let mut tansu = Tansu::start(0);
    let port = tansu.port;
    let fixtures = Fixtures::build();
    let config = fixtures
        .cuda_config(std::path::Path::new("/unused"), r#"["default"]"#)
        .replace(
            "[[sinks]]\ntype = \"parquet\"\npath = \"/unused\"\n",
            &format!(
                "[[sinks]]\ntype = \"kafka\"\nbrokers = \"{}\"\ndelivery_timeout_secs = 2\n",
                tansu.brokers()
            ),
        );
    let agent = Agent::start(&config, &[]);
    let address = agent.metrics_address();
    let mut workload = fixtures
        .workload(&["launches", "40000", "250000"])
        .spawn()
        .expect("workload");
    let sent = "gpuship_component_sent_events_total{component_id=\"kafka\",component_kind=\"sink\",kind=\"cuda\"}";
    let deadline = Instant::now() + Duration::from_secs(20);
    while metric(&address, sent) == 0 {
        assert!(
            Instant::now() < deadline,
            "nothing delivered:\n{}",
            agent.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    tansu.peer.kill();
    let healthy = "gpuship_sink_healthy{component_id=\"kafka\",component_kind=\"sink\"}";
    let deadline = Instant::now() + Duration::from_secs(30);
    while metric(&address, healthy) == 1 {
        assert!(
            Instant::now() < deadline,
            "the sink never noticed the outage:\n{}",
            agent.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let tansu = Tansu::start(port);
    assert!(workload.wait().unwrap().success());
    let deadline = Instant::now() + Duration::from_secs(60);
    while metric(&address, healthy) == 0 {
        assert!(
            Instant::now() < deadline,
            "the sink never recovered:\n{}",
            agent.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let stopped = agent.stop();
    assert!(stopped.status.success(), "{}", stopped.log);
    let delivered = stopped.assert_nothing_lost("cuda", "cuda");
    assert_eq!(delivered, 40_000);
    let errors = &stopped.outcome["accounting"]["sink_health"][0]["errors"];
    assert!(
        errors.as_object().is_some_and(|e| !e.is_empty()),
        "the outage shows as delivery errors: {}",
        stopped.outcome
    );
    // The restarted broker keeps memory storage: it holds what was delivered after it came
    // back, each event once or (re-sent after a timeout) more, and none outside the workload.
    let after_restart = consume_all(&tansu.brokers(), "gpuship.cuda", 1);
    assert!(!after_restart.is_empty());
    drop(tansu);
}
