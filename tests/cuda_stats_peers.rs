//! Real eBPF, `stats` mode, real peers: the `cuda_stats` rows reach a Kafka broker (tansu) and
//! an OpenTelemetry collector (rotel) as their own kind, exactly as many as the lake got.

use std::collections::BTreeMap;

use crate::support;
use crate::support::agent::{data_dir, Agent};
use crate::support::cuda_stats::stats_config;
use crate::support::Fixtures;

#[test]
fn statistics_reach_kafka_and_the_collector_as_their_own_kind() {
    let _alone = support::exclusive();
    let tansu = support::peers::Tansu::start(0);
    let rotel = support::peers::Rotel::start(0, 0);
    let brokers = tansu.brokers();
    let fixtures = Fixtures::build();
    let data = data_dir();
    let mut config = stats_config(&fixtures, data.path(), "stats_interval_secs = 1\n");
    config += &format!(
        "\n[[sinks]]\ntype = \"kafka\"\nname = \"kafka\"\nbrokers = \"{brokers}\"\n\
         topic = \"k.{{kind}}\"\nencoding = \"json\"\n\
         \n[[sinks]]\ntype = \"otlp\"\nname = \"otlp\"\nendpoint = \"http://127.0.0.1:{}\"\n\
         protocol = \"grpc\"\nkinds = [\"cuda_stats\"]\n",
        rotel.grpc_port
    );
    let agent = Agent::start(&config, &[]);
    let (pid, _) = fixtures.run_workload(&["sequence", "2"], &[]);
    let stopped = agent.stop();
    assert!(stopped.status.success(), "{}", stopped.log);
    let lake_rows = stopped.sink_named("parquet", "cuda_stats")["delivered"]
        .as_u64()
        .unwrap();
    assert!(lake_rows >= 4, "{}", stopped.outcome);
    for sink in ["kafka", "otlp"] {
        let counters = stopped.sink_named(sink, "cuda_stats");
        assert_eq!(counters["received"], lake_rows, "{sink}: {counters}");
        assert_eq!(counters["delivered"], lake_rows, "{sink}: {counters}");
    }

    // Kafka: one JSON message per row on the kind's own topic, the histogram as objects.
    let messages = crate::support::kafka::consume_all(&brokers, "k.cuda_stats", lake_rows as usize);
    assert_eq!(messages.len() as u64, lake_rows, "exactly once");
    let mut calls: BTreeMap<String, u64> = BTreeMap::new();
    for message in &messages {
        let row: serde_json::Value = serde_json::from_slice(&message.payload).unwrap();
        assert_eq!(row["pid"], pid);
        assert_eq!(message.headers["kind"], "cuda_stats");
        *calls
            .entry(row["function"].as_str().unwrap().to_string())
            .or_default() += row["calls"].as_u64().unwrap();
        let buckets = row["duration_buckets"].as_array().expect("buckets");
        let in_buckets: u64 = buckets.iter().map(|b| b["calls"].as_u64().unwrap()).sum();
        assert_eq!(in_buckets, row["calls"].as_u64().unwrap(), "{row}");
        assert!(buckets
            .iter()
            .all(|b| b["from_ns"].as_u64() < b["to_ns"].as_u64()));
    }
    let expected: BTreeMap<String, u64> = [
        ("cuCtxSynchronize", 2),
        ("cuLaunchKernel", 2),
        ("cuLaunchKernelEx", 2),
        ("cuLaunchKernel_ptsz", 2),
        ("cuMemAlloc_v2", 4),
    ]
    .into_iter()
    .map(|(f, n)| (f.to_string(), n))
    .collect();
    assert_eq!(calls, expected);

    // OTLP: one log record per row, named and counted.
    let records = rotel.wait_for_records(lake_rows as usize, std::time::Duration::from_secs(20));
    let stats: Vec<_> = records
        .iter()
        .filter(|r| r.event_name == "cuda.call.stats")
        .collect();
    assert_eq!(stats.len() as u64, lake_rows, "{records:#?}");
    let mut otlp_calls: BTreeMap<String, u64> = BTreeMap::new();
    for record in &stats {
        let function = record.attributes["cuda.function"]
            .trim_start_matches("Str(")
            .trim_end_matches(')')
            .to_string();
        let n: u64 = record.attributes["cuda.stats.calls"]
            .trim_start_matches("Int(")
            .trim_end_matches(')')
            .parse()
            .unwrap();
        *otlp_calls.entry(function).or_default() += n;
        assert!(record.body.contains(" times in "), "{record:?}");
    }
    assert_eq!(otlp_calls, expected);
    let failing = stats.iter().filter(|r| r.severity_text == "WARN").count();
    assert!(failing >= 1, "the OOM allocations' row is WARN: {stats:#?}");
}
