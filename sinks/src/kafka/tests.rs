//! The Kafka sink against librdkafka's mock cluster: the faults a real broker cannot be told to
//! produce (request errors, slow or silent leaders) and what each one ends as in the counters
//! that `/metrics` shows. The real-broker tests are in the agent's `tests/kafka.rs`.

use std::sync::Arc;
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Headers;
use rdkafka::mocking::MockCluster;
use rdkafka::producer::DefaultProducerContext;
use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};
use rdkafka::{Message as _, Offset, TopicPartitionList};

use super::*;
use crate::queue::{queue_with, BufferConfig, QueueOptions};
use crate::spool::{Spool, SpoolConfig};
use crate::stats::SinkStats;
use crate::test_support::{cuda_batch, identity, xid_batch_with, xid_record};
use crate::{EventBatch, EventKind};
use enum_map::EnumMap;
use rdkafka::message::OwnedHeaders;

struct Run {
    stats: Arc<SinkStats>,
}

/// Runs the sink over `batches` against `brokers`; `during` runs once the batches are queued,
/// before the queue closes.
async fn run_sink(
    config: KafkaSinkConfig,
    batches: Vec<EventBatch>,
    spool_dir: Option<&std::path::Path>,
    shutdown_timeout: Duration,
    during: impl std::future::Future<Output = ()>,
) -> Run {
    let stats = Arc::new(SinkStats::default());
    let spool = spool_dir.map(|dir| Spool::open(dir, SpoolConfig::default()).unwrap());
    let (sender, receiver) = queue_with(
        QueueOptions {
            name: "kafka".into(),
            buffer: BufferConfig::default(),
            spool,
            shutdown_timeout,
        },
        stats.clone(),
    );
    let sink = Box::new(KafkaSink::new("kafka", config, identity(), None));
    let task = tokio::spawn(sink.run(SinkInput {
        batches: receiver,
        stats: stats.clone(),
    }));
    for batch in batches {
        sender.send_blocking(batch);
    }
    during.await;
    drop(sender);
    tokio::time::timeout(Duration::from_secs(60), task)
        .await
        .expect("sink finishes")
        .unwrap()
        .unwrap();
    Run { stats }
}

fn config(brokers: String) -> KafkaSinkConfig {
    let mut config = KafkaSinkConfig::with_brokers(brokers);
    config.batch.linger_ms = 1;
    config
}

fn consume(brokers: &str, topic: &str, expected: usize) -> Vec<rdkafka::message::OwnedMessage> {
    let consumer: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", "test")
        .create()
        .unwrap();
    let mut assignment = TopicPartitionList::new();
    assignment
        .add_partition_offset(topic, 0, Offset::Beginning)
        .unwrap();
    consumer.assign(&assignment).unwrap();
    let mut messages = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while messages.len() < expected && std::time::Instant::now() < deadline {
        if let Some(Ok(message)) = consumer.poll(Duration::from_millis(200)) {
            messages.push(message.detach());
        }
    }
    // Anything beyond the expected count would be a duplicate.
    while let Some(Ok(message)) = consumer.poll(Duration::from_millis(500)) {
        messages.push(message.detach());
    }
    messages
}

fn header(message: &rdkafka::message::OwnedMessage, name: &str) -> String {
    let headers = message.headers().expect("headers");
    let header = headers.iter().find(|h| h.key == name).expect(name);
    String::from_utf8(header.value.unwrap().to_vec()).unwrap()
}

fn mock_cluster() -> MockCluster<'static, DefaultProducerContext> {
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic("gpuship.xid", 1, 1).unwrap();
    cluster.create_topic("gpuship.cuda", 1, 1).unwrap();
    cluster
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_row_is_one_message_with_its_key_and_headers() {
    let cluster = mock_cluster();
    let brokers = cluster.bootstrap_servers();
    let xids = xid_batch_with(&[
        xid_record(79, "0000:3b:00.0", "GPU has fallen off the bus."),
        xid_record(31, "0000:86:00.0", "MMU Fault"),
    ]);
    let run = run_sink(
        config(brokers.clone()),
        vec![xids, cuda_batch(50, 0)],
        None,
        Duration::from_secs(10),
        async {},
    )
    .await;
    let stats = &run.stats;
    assert_eq!(stats.delivered.get(EventKind::Xid), 2);
    assert_eq!(stats.delivered.get(EventKind::Cuda), 50);
    assert_eq!(stats.in_flight(EventKind::Cuda), 0);
    assert!(stats.errors().is_empty(), "{:?}", stats.errors());

    let xid_messages = consume(&brokers, "gpuship.xid", 2);
    assert_eq!(xid_messages.len(), 2);
    assert_eq!(xid_messages[0].key(), Some(&b"h/0000:3b:00.0"[..]));
    assert_eq!(xid_messages[1].key(), Some(&b"h/0000:86:00.0"[..]));
    assert_eq!(header(&xid_messages[0], "kind"), "xid");
    assert_eq!(
        header(&xid_messages[0], "schema_version"),
        crate::schema::SCHEMA_VERSION
    );
    assert_eq!(header(&xid_messages[0], "host"), "h");
    assert_eq!(header(&xid_messages[0], "encoding"), "json");
    let first: serde_json::Value =
        serde_json::from_slice(xid_messages[0].payload().unwrap()).unwrap();
    assert_eq!(first["code"], 79);
    assert_eq!(first["message"], "GPU has fallen off the bus.");
    let cuda_messages = consume(&brokers, "gpuship.cuda", 50);
    assert_eq!(cuda_messages.len(), 50);
    let bytes: Vec<u64> = cuda_messages
        .iter()
        .map(|m| {
            serde_json::from_slice::<serde_json::Value>(m.payload().unwrap()).unwrap()["bytes"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(bytes, (0..50).collect::<Vec<u64>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_leader_times_out_then_the_rows_are_retried_and_delivered() {
    let cluster = mock_cluster();
    let mut config = config(cluster.bootstrap_servers());
    config.delivery_timeout_secs = 1;
    cluster
        .broker_round_trip_time(1, Duration::from_secs(3))
        .unwrap();
    let run = run_sink(
        config,
        vec![cuda_batch(20, 0)],
        None,
        Duration::from_secs(30),
        async {
            tokio::time::sleep(Duration::from_millis(2500)).await;
            cluster.broker_round_trip_time(1, Duration::ZERO).unwrap();
        },
    )
    .await;
    let stats = &run.stats;
    let errors = stats.errors();
    assert!(
        errors.get("message_timed_out").copied().unwrap_or(0) >= 20,
        "{errors:?}"
    );
    assert_eq!(stats.delivered.get(EventKind::Cuda), 20);
    assert_eq!(stats.failed.get(EventKind::Cuda), 0);
    assert!(stats.healthy());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_the_broker_refuses_for_good_is_counted_failed() {
    let cluster = mock_cluster();
    cluster.request_errors(
        RDKafkaApiKey::Produce,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE],
    );
    let mut config = config(cluster.bootstrap_servers());
    config.encoding = crate::encode::Encoding::ArrowIpc;
    let run = run_sink(
        config,
        vec![cuda_batch(10, 0)],
        None,
        Duration::from_secs(10),
        async {},
    )
    .await;
    let stats = &run.stats;
    assert_eq!(stats.failed.get(EventKind::Cuda), 10);
    assert_eq!(stats.delivered.get(EventKind::Cuda), 0);
    assert_eq!(stats.errors().get("message_size_too_large"), Some(&10));
    assert_eq!(stats.in_flight(EventKind::Cuda), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retriable_request_errors_are_retried_by_the_producer() {
    let cluster = mock_cluster();
    cluster.request_errors(
        RDKafkaApiKey::Produce,
        &[
            RDKafkaRespErr::RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS,
            RDKafkaRespErr::RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT,
            RDKafkaRespErr::RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION,
        ],
    );
    let brokers = cluster.bootstrap_servers();
    let run = run_sink(
        config(brokers.clone()),
        vec![cuda_batch(5, 0)],
        None,
        Duration::from_secs(10),
        async {},
    )
    .await;
    assert_eq!(run.stats.delivered.get(EventKind::Cuda), 5);
    assert_eq!(
        consume(&brokers, "gpuship.cuda", 5).len(),
        5,
        "no duplicates"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_that_never_answers_leaves_everything_in_the_spool_at_shutdown() {
    let cluster = mock_cluster();
    cluster.broker_down(1).unwrap();
    let spool_dir = tempfile::tempdir().unwrap();
    let mut patient = config(cluster.bootstrap_servers());
    patient.delivery_timeout_secs = 60;
    let run = run_sink(
        patient,
        vec![
            xid_batch_with(&[xid_record(79, "0000:3b:00.0", "m")]),
            cuda_batch(30, 0),
        ],
        Some(spool_dir.path()),
        Duration::from_secs(2),
        async {},
    )
    .await;
    let stats = &run.stats;
    assert_eq!(stats.delivered.total(), 0);
    assert_eq!(stats.spool_pending(EventKind::Cuda), 30);
    assert_eq!(stats.spool_pending(EventKind::Xid), 1);
    assert_eq!(stats.dropped_total(EventKind::Cuda), 0);
    assert!(!stats.healthy());
    let purged: u64 = stats
        .errors()
        .iter()
        .filter(|(label, _)| label.starts_with("purge"))
        .map(|(_, n)| n)
        .sum();
    assert_eq!(purged, 31, "{:?}", stats.errors());
    // The next run replays the spool to a healthy broker.
    cluster.broker_up(1).unwrap();
    let spool = Spool::open(spool_dir.path(), SpoolConfig::default()).unwrap();
    assert_eq!(spool.pending_events(EventKind::Cuda), 30);
    drop(spool);
    let run = run_sink(
        config(cluster.bootstrap_servers()),
        Vec::new(),
        Some(spool_dir.path()),
        Duration::from_secs(10),
        async {},
    )
    .await;
    assert_eq!(run.stats.delivered.get(EventKind::Cuda), 30);
    assert_eq!(run.stats.delivered.get(EventKind::Xid), 1);
    assert_eq!(run.stats.spool_pending(EventKind::Cuda), 0);
}

#[test]
fn the_start_line_names_the_topic_of_every_kind() {
    let routes = EnumMap::from_fn(|kind: EventKind| KindRoute {
        topic: format!("gpuship.{kind}"),
        headers: OwnedHeaders::new(),
    });
    assert_eq!(
        topics(&routes),
        concat!(
            "xid=gpuship.xid,cuda=gpuship.cuda,driver=gpuship.driver,",
            "cuda_stats=gpuship.cuda_stats,cuda_memory=gpuship.cuda_memory"
        )
    );
}
