//! The Kafka sink's worker: the producer and its topics, sending each batch's messages without
//! waiting, settling batches as their delivery reports come back, replacing a fenced or
//! fatally failed producer, and purging what is in flight at the shutdown deadline.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use enum_map::EnumMap;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseRecord, Producer, PurgeConfig, ThreadedProducer};
use rdkafka::ClientConfig;
use tokio::sync::mpsc;

use super::delivery::{
    disposition, error_label, Delivery, DeliveryContext, Disposition, InFlightBatch,
};
use super::messages::{Message, MessageEncoder};
use super::KafkaSink;
use crate::otlp::OtlpMapping;
use crate::schema::SCHEMA_VERSION;
use crate::sink::{SinkError, SinkInput};
use crate::{EventBatch, EventKind};

type KafkaProducer = ThreadedProducer<DeliveryContext>;

/// Per-kind constants: topic and headers.
#[derive(Debug)]
pub(super) struct KindRoute {
    pub(super) topic: String,
    pub(super) headers: OwnedHeaders,
}

pub(super) struct Worker {
    name: String,
    client_config: ClientConfig,
    routes: EnumMap<EventKind, KindRoute>,
    encoder: MessageEncoder,
    producer: Arc<KafkaProducer>,
    /// Producers replaced after a fatal error, kept until their last report.
    retired: Vec<Arc<KafkaProducer>>,
    settled_tx: mpsc::UnboundedSender<Arc<InFlightBatch>>,
    settled: mpsc::UnboundedReceiver<Arc<InFlightBatch>>,
    /// Rows in batches not yet settled.
    in_flight_rows: usize,
    max_in_flight_rows: usize,
    purged_at_deadline: bool,
    /// When a message was last acknowledged (or the producer was made).
    last_success: Instant,
    /// When the producer was last replaced.
    last_replaced: Instant,
    delivery_timeout: Duration,
}

/// Every kind's topic, `kind=topic` comma-separated, for the start-up log line.
pub(super) fn topics(routes: &EnumMap<EventKind, KindRoute>) -> String {
    routes
        .iter()
        .map(|(kind, route)| format!("{kind}={}", route.topic))
        .collect::<Vec<_>>()
        .join(",")
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

impl Worker {
    pub(super) fn start(sink: KafkaSink) -> Result<Self, SinkError> {
        let start_error = |reason: String| SinkError::Start {
            sink: sink.name.clone(),
            reason,
        };
        let config = &sink.config;
        let client_config = config
            .client_config()
            .map_err(|e| start_error(e.to_string()))?;
        let topic = config.topic_template().map_err(start_error)?;
        let key = config.key_template().map_err(start_error)?;
        let routes = EnumMap::from_fn(|kind: EventKind| KindRoute {
            topic: topic.render(|name| match name {
                "kind" => kind.to_string(),
                _ => sink.identity.host.to_string(),
            }),
            headers: OwnedHeaders::new_with_capacity(4)
                .insert(Header {
                    key: "kind",
                    value: Some(kind.as_str()),
                })
                .insert(Header {
                    key: "schema_version",
                    value: Some(SCHEMA_VERSION),
                })
                .insert(Header {
                    key: "host",
                    value: Some(&*sink.identity.host),
                })
                .insert(Header {
                    key: "encoding",
                    value: Some(config.encoding.as_str()),
                }),
        });
        let encoder = MessageEncoder::new(
            config.encoding,
            key,
            config.batch.max_rows_per_message,
            config.batch.max_message_bytes,
            OtlpMapping::new(
                &sink.identity,
                sink.host_id.as_deref(),
                &config.resource_attributes,
            ),
        );
        let (settled_tx, settled) = mpsc::unbounded_channel();
        let producer = new_producer(&sink.name, &client_config, settled_tx.clone())
            .map_err(|e| start_error(format!("cannot create the producer: {e}")))?;
        tracing::info!(sink = %sink.name, brokers = %crate::secret::redact_url(&config.brokers), topics = %topics(&routes), encoding = config.encoding.as_str(), "kafka sink started");
        Ok(Self {
            name: sink.name,
            max_in_flight_rows: config.max_in_flight_messages as usize,
            client_config,
            routes,
            encoder,
            producer,
            retired: Vec::new(),
            settled_tx,
            settled,
            in_flight_rows: 0,
            purged_at_deadline: false,
            last_success: Instant::now(),
            last_replaced: Instant::now(),
            delivery_timeout: Duration::from_secs(config.delivery_timeout_secs),
        })
    }

    pub(super) async fn run(&mut self, mut input: SinkInput) {
        let mut input_closed = false;
        loop {
            self.replace_producer_after_fatal_error();
            let take_more = !input_closed && self.in_flight_rows < self.max_in_flight_rows;
            tokio::select! {
                biased;
                Some(batch) = self.settled.recv() => {
                    if self.settle(batch, &input) {
                        // Rows went back to the queue: take them again (also while draining).
                        input_closed = false;
                    }
                }
                // At the in-flight limit (a broker that stopped acknowledging), XIDs still go
                // out, ahead of the rows waiting behind the limit.
                next = input.batches.recv_or_xid(take_more), if !input_closed => match next {
                    Some(batch) => self.send(batch, &input).await,
                    None => input_closed = true,
                },
                _ = tokio::time::sleep(Duration::from_millis(100)) => {}
            }
            if input_closed && self.in_flight_rows == 0 {
                break;
            }
            self.purge_at_deadline(&input);
        }
        tracing::info!(sink = %self.name, "kafka sink finished: every message acknowledged or handed back");
    }

    /// Encodes `batch` and hands its messages to the producer, waiting only while the
    /// producer's queue is full.
    async fn send(&mut self, batch: EventBatch, input: &SinkInput) {
        let kind = batch.kind;
        let messages = match self.encoder.encode(kind, &batch.records, now_ns()) {
            Ok(messages) => messages,
            Err(err) => {
                let rows = batch.len() as u64;
                input.stats.failed.add(kind, rows);
                input.stats.count_error("encode", rows);
                tracing::error!(sink = %self.name, %kind, rows, %err, "cannot encode batch; rows lost");
                return;
            }
        };
        if messages.is_empty() {
            return;
        }
        self.in_flight_rows += batch.len();
        let in_flight = Arc::new(InFlightBatch::new(kind, batch.records, messages.len()));
        let route = &self.routes[kind];
        for Message {
            key,
            payload,
            timestamp_ms,
            rows,
        } in messages
        {
            let delivery = Box::new(Delivery {
                batch: in_flight.clone(),
                rows,
            });
            let mut record = BaseRecord::with_opaque_to(&route.topic, delivery)
                .key(key.as_bytes())
                .payload(payload.as_slice())
                .headers(route.headers.clone())
                .timestamp(timestamp_ms);
            loop {
                match self.producer.send(record) {
                    Ok(()) => break,
                    Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                        record = back;
                        if deadline_passed(input) {
                            self.producer
                                .context()
                                .settle(*record.delivery_opaque, Some(RDKafkaErrorCode::QueueFull));
                            break;
                        }
                        let room = self.producer.context().room.notified();
                        let _ = tokio::time::timeout(Duration::from_millis(10), room).await;
                    }
                    Err((err, back)) => {
                        let code = err.rdkafka_error_code().unwrap_or(RDKafkaErrorCode::Fail);
                        self.producer
                            .context()
                            .settle(*back.delivery_opaque, Some(code));
                        break;
                    }
                }
            }
        }
    }

    /// Accounts a batch whose every message has a report. True when rows went back to the
    /// queue.
    fn settle(&mut self, batch: Arc<InFlightBatch>, input: &SinkInput) -> bool {
        let rows = batch.records.num_rows();
        self.in_flight_rows -= rows;
        let kind = batch.kind;
        let stats = &input.stats;
        let failures = batch.take_failures();
        if failures.len() < batch.messages() {
            self.last_success = Instant::now();
        }
        if failures.is_empty() {
            stats.delivered.add(kind, rows as u64);
            input.batches.delivered();
            return false;
        }
        let mut retry = Vec::new();
        let mut failed = 0usize;
        for (message_rows, code) in &failures {
            stats.count_error(&error_label(*code), message_rows.len() as u64);
            match disposition(*code) {
                Disposition::Retry => message_rows.extend_into(&mut retry),
                Disposition::Fail => {
                    failed += message_rows.len();
                    tracing::error!(sink = %self.name, %kind, rows = message_rows.len(), error = ?code, "kafka rejected the message for good; rows lost");
                }
            }
        }
        let delivered = rows - retry.len() - failed;
        stats.delivered.add(kind, delivered as u64);
        stats.failed.add(kind, failed as u64);
        if retry.is_empty() {
            if delivered > 0 {
                input.batches.delivered();
            }
            return false;
        }
        if failures
            .iter()
            .any(|(_, code)| *code == RDKafkaErrorCode::MessageTimedOut)
        {
            self.replace_stuck_producer();
        }
        if failures.iter().any(|(_, code)| fenced(*code))
            && self.last_replaced.elapsed() >= Duration::from_secs(1)
        {
            // The broker no longer takes this producer id or epoch (seen with tansu after a
            // hang, once messages timed out in flight): every retry would fail the same way.
            self.replace_producer("the broker fenced the producer id");
        }
        retry.sort_unstable();
        tracing::warn!(sink = %self.name, %kind, rows = retry.len(), first_error = ?failures[0].1, "kafka delivery failed; rows will be retried");
        let indices = arrow_array::UInt32Array::from(retry);
        match arrow_select::take::take_record_batch(&batch.records, &indices) {
            Ok(records) => input.batches.reject(EventBatch::new(kind, records)),
            Err(err) => {
                let rows = indices.len() as u64;
                stats.failed.add(kind, rows);
                tracing::error!(sink = %self.name, %kind, rows, %err, "cannot rebuild failed rows; rows lost");
            }
        }
        true
    }

    /// At the shutdown deadline, what the producer still holds is purged: its reports come
    /// back as failures and the rows are spooled by the queue.
    fn purge_at_deadline(&mut self, input: &SinkInput) {
        if self.purged_at_deadline || self.in_flight_rows == 0 || !deadline_passed(input) {
            return;
        }
        self.purged_at_deadline = true;
        tracing::warn!(sink = %self.name, rows = self.in_flight_rows, "shutdown deadline: purging unacknowledged kafka messages to the spool");
        for producer in std::iter::once(&self.producer).chain(&self.retired) {
            producer.purge(PurgeConfig::default().queue().inflight());
        }
    }

    fn replace_producer_after_fatal_error(&mut self) {
        self.retired.retain(|p| p.in_flight_count() > 0);
        if self.producer.context().fatal.load(Ordering::Acquire) {
            self.replace_producer("a fatal error");
        }
    }

    /// Messages have only timed out for two delivery timeouts: the producer may be stuck on
    /// state the broker lost (a restarted broker that forgot the producer's idempotence id
    /// never accepts its sequence again). A fresh producer costs nothing during a plain
    /// outage and gets delivery going again after such a restart.
    fn replace_stuck_producer(&mut self) {
        let stuck_for = self.delivery_timeout.saturating_mul(2);
        if self.last_success.elapsed() >= stuck_for && self.last_replaced.elapsed() >= stuck_for {
            self.replace_producer("messages timing out for two delivery timeouts");
        }
    }

    fn replace_producer(&mut self, why: &str) {
        match new_producer(&self.name, &self.client_config, self.settled_tx.clone()) {
            Ok(producer) => {
                let old = std::mem::replace(&mut self.producer, producer);
                old.purge(PurgeConfig::default().queue().inflight());
                self.retired.push(old);
                self.last_replaced = Instant::now();
                tracing::warn!(sink = %self.name, reason = why, "kafka producer replaced");
            }
            Err(err) => {
                tracing::error!(sink = %self.name, %err, "cannot replace the kafka producer; retrying");
            }
        }
    }
}

/// Errors that mean the broker refuses this producer's id or epoch for good.
fn fenced(code: RDKafkaErrorCode) -> bool {
    matches!(
        code,
        RDKafkaErrorCode::ProducerFenced
            | RDKafkaErrorCode::InvalidProducerEpoch
            | RDKafkaErrorCode::UnknownProducerId
            | RDKafkaErrorCode::OutOfOrderSequenceNumber
            | RDKafkaErrorCode::InvalidProducerIdMapping
    )
}

fn deadline_passed(input: &SinkInput) -> bool {
    input
        .batches
        .shutdown_deadline()
        .is_some_and(|deadline| Instant::now() >= deadline)
}

fn new_producer(
    sink: &str,
    config: &ClientConfig,
    settled: mpsc::UnboundedSender<Arc<InFlightBatch>>,
) -> Result<Arc<KafkaProducer>, KafkaError> {
    let context = DeliveryContext::new(sink, settled).hiding_secrets_of(config);
    Ok(Arc::new(config.create_with_context(context)?))
}
