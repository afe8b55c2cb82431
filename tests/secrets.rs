//! Passwords and tokens come from the environment or a file and never appear in the agent's
//! log, its summary or `/metrics`, even while the destination refuses or fails.

use std::time::Duration;

use crate::support;
use crate::support::agent::Agent;
use crate::support::metrics::http;
use crate::support::peers::{Rotel, Tansu};
use crate::support::Fixtures;

const KAFKA_SECRET: &str = "kafka-pw-8f1d2c9a77";
const OTLP_SECRET: &str = "Bearer otlp-token-51c0ffee";

#[test]
fn secrets_never_reach_logs_summary_or_metrics() {
    let _shared = support::shared();
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, format!("{OTLP_SECRET}\n")).unwrap();
    let tansu = Tansu::start(0);
    let rotel = Rotel::start(0, 0);
    let fixtures = Fixtures::build();
    let config = format!(
        "[agent]\nprogress_interval_secs = 1\nshutdown_timeout_secs = 3\n\n[sources.xid]\ntracepoint = false\nkmsg = false\n\n\
         [sources.cuda]\nlibraries = [\"{}\"]\nfunctions = [\"default\"]\nstats = []\ndrain_interval_ms = 20\n\n\
         [batch]\ntimeout_ms = 100\n\n\
         [[sinks]]\ntype = \"kafka\"\nbrokers = \"{}\"\ndelivery_timeout_secs = 2\n\
         [sinks.sasl]\nmechanism = \"PLAIN\"\nusername = \"gpuship\"\npassword = {{ env = \"GPUSHIP_TEST_KAFKA_SECRET\" }}\n\n\
         [[sinks]]\ntype = \"otlp\"\nendpoint = \"http://127.0.0.1:{}\"\ncuda_filter = {{ all = true }}\n\
         [sinks.headers]\nauthorization = {{ file = \"{}\" }}\n",
        fixtures.libcuda.display(),
        tansu.brokers(),
        rotel.grpc_port,
        token_file.display()
    );
    // The agent's environment only: setting it in this process would race with the other
    // tests' threads reading theirs.
    let agent = Agent::start_with_env(&config, &[], &[("GPUSHIP_TEST_KAFKA_SECRET", KAFKA_SECRET)]);
    let address = agent.metrics_address();
    fixtures.run_workload(&["sequence", "1"], &[]);
    // The broker does not speak SASL: the Kafka sink fails and logs why, while the collector
    // takes every call with the token attached.
    agent.wait_for_log("kafka delivery failed", Duration::from_secs(30));
    let (_, metrics) = http(&address, "GET /metrics HTTP/1.0\r\n\r\n");
    let stopped = agent.stop();
    assert!(stopped.status.success(), "{}", stopped.log);
    let otlp = stopped.sink_named("otlp", "cuda");
    assert_eq!(otlp["delivered"], 28, "{otlp}");
    for (what, text) in [
        ("log", stopped.log.as_str()),
        ("summary", &stopped.outcome.to_string()),
        ("metrics", metrics.as_str()),
    ] {
        assert!(
            !text.contains(KAFKA_SECRET),
            "the Kafka password is in the {what}"
        );
        assert!(
            !text.contains("otlp-token-51c0ffee"),
            "the OTLP token is in the {what}"
        );
    }
}

#[test]
fn a_password_or_token_in_an_endpoint_url_is_never_printed() {
    let _shared = support::shared();
    // A port nothing listens on: every export fails, and failures are where URLs leak.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let fixtures = Fixtures::build();
    let config = format!(
        "[agent]\nprogress_interval_secs = 1\nshutdown_timeout_secs = 2\n\n[sources.xid]\ntracepoint = false\nkmsg = false\n\n\
         [sources.cuda]\nlibraries = [\"{}\"]\nfunctions = [\"default\"]\nstats = []\ndrain_interval_ms = 20\n\n\
         [batch]\ntimeout_ms = 100\n\n\
         [[sinks]]\ntype = \"otlp\"\nendpoint = \"http://gpuship:url-pw-3b7e@127.0.0.1:{port}/?token=q-secret-9f\"\n\
         cuda_filter = {{ all = true }}\n\n\
         [[sinks]]\ntype = \"otlp\"\nname = \"http\"\nprotocol = \"http/protobuf\"\n\
         endpoint = \"http://gpuship:url-pw-3b7e@127.0.0.1:{port}/v1/logs?token=q-secret-9f\"\n\
         cuda_filter = {{ all = true }}\n",
        fixtures.libcuda.display(),
    );
    let agent = Agent::start(&config, &[]);
    let address = agent.metrics_address();
    fixtures.run_workload(&["sequence", "1"], &[]);
    agent.wait_for_log("otlp export failed", Duration::from_secs(30));
    let (_, metrics) = http(&address, "GET /metrics HTTP/1.0\r\n\r\n");
    let stopped = agent.stop();
    // The endpoint is still named, without its secrets.
    for expected in [
        format!("endpoint=http://***@127.0.0.1:{port}/?token=***"),
        format!("endpoint=http://***@127.0.0.1:{port}/v1/logs?token=***"),
    ] {
        assert!(
            stopped.log.contains(&expected),
            "{expected}:\n{}",
            stopped.log
        );
    }
    for (what, text) in [
        ("log", stopped.log.as_str()),
        ("summary", &stopped.outcome.to_string()),
        ("metrics", metrics.as_str()),
    ] {
        for secret in ["url-pw-3b7e", "q-secret-9f", "gpuship:url"] {
            assert!(!text.contains(secret), "{secret} is in the {what}:\n{text}");
        }
    }
}
