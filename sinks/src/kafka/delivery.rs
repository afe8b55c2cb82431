//! Delivery reports: the producer context that librdkafka calls for every message, the batch
//! each message belongs to, and what an error means for the rows it carried.
//!
//! A batch is settled once every one of its messages has a report: its rows are delivered,
//! retried (errors a later attempt can fix: timeouts, unreachable brokers, a producer that hit a
//! fatal error) or failed for good (a message the broker will never take, e.g. too large).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use arrow_array::RecordBatch;
use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{DeliveryResult, ProducerContext};
use tokio::sync::{mpsc, Notify};

use super::messages::MessageRows;
use crate::secret::{redact_text, Secret};
use crate::EventKind;

/// librdkafka settings whose values are secrets, hidden from every relayed line.
const SECRET_KEYS: [&str; 5] = [
    "sasl.password",
    "ssl.key.password",
    "ssl.keystore.password",
    "sasl.oauthbearer.client.secret",
    "ssl.key.pem",
];

/// A batch whose messages are with the producer.
#[derive(Debug)]
pub struct InFlightBatch {
    /// Kind of the rows.
    pub kind: EventKind,
    /// The rows, kept to rebuild what must be retried.
    pub records: RecordBatch,
    /// Messages it was sent as.
    messages: usize,
    /// Messages without a report yet.
    outstanding: AtomicUsize,
    /// Rows of failed messages and why.
    failures: Mutex<Vec<(MessageRows, RDKafkaErrorCode)>>,
}

impl InFlightBatch {
    /// A batch about to be sent as `messages` messages.
    pub fn new(kind: EventKind, records: RecordBatch, messages: usize) -> Self {
        Self {
            kind,
            records,
            messages,
            outstanding: AtomicUsize::new(messages),
            failures: Mutex::new(Vec::new()),
        }
    }

    /// Number of messages the batch was sent as.
    pub fn messages(&self) -> usize {
        self.messages
    }

    /// The failed messages' rows and errors (once settled).
    pub fn take_failures(&self) -> Vec<(MessageRows, RDKafkaErrorCode)> {
        std::mem::take(&mut *self.failures.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// The opaque each message carries to its report.
#[derive(Debug)]
pub struct Delivery {
    /// Its batch.
    pub batch: Arc<InFlightBatch>,
    /// Its rows.
    pub rows: MessageRows,
}

/// What to do with rows whose message failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disposition {
    /// A later attempt can succeed: back to the queue (retried with backoff, spooled when
    /// memory is full or at shutdown).
    Retry,
    /// The broker will never accept this message: counted as failed.
    Fail,
}

/// Sorts a delivery error.
pub fn disposition(code: RDKafkaErrorCode) -> Disposition {
    use RDKafkaErrorCode::*;
    match code {
        MessageSizeTooLarge
        | MessageBatchTooLarge
        | InvalidMessageSize
        | InvalidMessage
        | InvalidRecord
        | UnsupportedCompressionType => Disposition::Fail,
        _ => Disposition::Retry,
    }
}

/// A stable snake_case label for an error code (`MessageTimedOut` -> `message_timed_out`).
pub fn error_label(code: RDKafkaErrorCode) -> String {
    let name = format!("{code:?}");
    let mut label = String::with_capacity(name.len() + 4);
    for (i, c) in name.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                label.push('_');
            }
            label.push(c.to_ascii_lowercase());
        } else {
            label.push(c);
        }
    }
    label
}

/// The producer's context: settles messages and relays librdkafka's logs and errors.
pub struct DeliveryContext {
    sink: String,
    /// The secret values handed to librdkafka (SASL and key passwords), never relayed: a log
    /// line or error that holds one shows `***` instead, and every URL in it is redacted.
    secrets: Vec<Secret>,
    settled: mpsc::UnboundedSender<Arc<InFlightBatch>>,
    /// Woken by every report: a producer queue that was full has room again.
    pub room: Notify,
    /// Set when librdkafka reports a fatal error: the producer must be replaced.
    pub fatal: AtomicBool,
}

impl DeliveryContext {
    /// A context that sends settled batches to `settled`.
    pub fn new(sink: &str, settled: mpsc::UnboundedSender<Arc<InFlightBatch>>) -> Self {
        Self {
            sink: sink.to_string(),
            secrets: Vec::new(),
            settled,
            room: Notify::new(),
            fatal: AtomicBool::new(false),
        }
    }

    /// The same context, hiding the secret values that `config` hands to librdkafka from
    /// every line it relays.
    pub fn hiding_secrets_of(mut self, config: &rdkafka::ClientConfig) -> Self {
        self.secrets = SECRET_KEYS
            .iter()
            .filter_map(|key| config.get(key))
            .map(|value| Secret::from(value.to_string()))
            .collect();
        self
    }

    /// `line` as it may be logged: URLs and the secret values redacted.
    fn shown(&self, line: &str) -> String {
        let secrets: Vec<&str> = self.secrets.iter().map(Secret::expose).collect();
        redact_text(line, &secrets)
    }

    /// Records the outcome of one message (also used for messages that never reached the
    /// producer, e.g. at the shutdown deadline).
    pub fn settle(&self, delivery: Delivery, error: Option<RDKafkaErrorCode>) {
        if let Some(code) = error {
            delivery
                .batch
                .failures
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((delivery.rows, code));
        }
        if delivery.batch.outstanding.fetch_sub(1, Ordering::AcqRel) == 1 {
            let _ = self.settled.send(delivery.batch);
        }
        self.room.notify_one();
    }
}

impl ClientContext for DeliveryContext {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, log_message: &str) {
        let log_message = self.shown(log_message);
        match level {
            RDKafkaLogLevel::Emerg
            | RDKafkaLogLevel::Alert
            | RDKafkaLogLevel::Critical
            | RDKafkaLogLevel::Error => {
                tracing::error!(sink = %self.sink, facility = fac, "librdkafka: {log_message}")
            }
            RDKafkaLogLevel::Warning => {
                tracing::warn!(sink = %self.sink, facility = fac, "librdkafka: {log_message}")
            }
            RDKafkaLogLevel::Notice | RDKafkaLogLevel::Info => {
                tracing::info!(sink = %self.sink, facility = fac, "librdkafka: {log_message}")
            }
            RDKafkaLogLevel::Debug => {
                tracing::debug!(sink = %self.sink, facility = fac, "librdkafka: {log_message}")
            }
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        let fatal = error.rdkafka_error_code() == Some(RDKafkaErrorCode::Fatal);
        let reason = self.shown(reason);
        let error = self.shown(&error.to_string());
        if fatal {
            self.fatal.store(true, Ordering::Release);
            tracing::error!(sink = %self.sink, %error, %reason, "kafka producer hit a fatal error; it will be replaced");
        } else {
            tracing::warn!(sink = %self.sink, %error, %reason, "kafka client error");
        }
    }
}

impl ProducerContext for DeliveryContext {
    type DeliveryOpaque = Box<Delivery>;

    fn delivery(&self, result: &DeliveryResult<'_>, delivery: Self::DeliveryOpaque) {
        let error = match result {
            Ok(_) => None,
            Err((err, _)) => Some(err.rdkafka_error_code().unwrap_or(RDKafkaErrorCode::Fail)),
        };
        self.settle(*delivery, error);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_and_dispositions() {
        assert_eq!(
            error_label(RDKafkaErrorCode::MessageTimedOut),
            "message_timed_out"
        );
        assert_eq!(
            error_label(RDKafkaErrorCode::MessageSizeTooLarge),
            "message_size_too_large"
        );
        assert_eq!(
            disposition(RDKafkaErrorCode::MessageTimedOut),
            Disposition::Retry
        );
        assert_eq!(
            disposition(RDKafkaErrorCode::NotLeaderForPartition),
            Disposition::Retry
        );
        assert_eq!(disposition(RDKafkaErrorCode::Fatal), Disposition::Retry);
        assert_eq!(
            disposition(RDKafkaErrorCode::MessageSizeTooLarge),
            Disposition::Fail
        );
    }

    #[test]
    fn relayed_lines_hide_the_passwords_handed_to_librdkafka_and_url_userinfo() {
        let (sender, _settled) = mpsc::unbounded_channel();
        let mut config = rdkafka::ClientConfig::new();
        config
            .set("sasl.password", "hunter22-sasl")
            .set("ssl.key.password", "hunter22-key");
        let context = DeliveryContext::new("k", sender).hiding_secrets_of(&config);
        assert_eq!(
            context.shown(
                "sasl_ssl://bob:hunter22-sasl@b1:9093/1: SASL PLAIN failed (pw hunter22-sasl), \
                 key hunter22-key"
            ),
            "sasl_ssl://***@b1:9093/1: SASL PLAIN failed (pw ***), key ***"
        );
        assert_eq!(
            context.shown("b1:9092/1: Connected"),
            "b1:9092/1: Connected"
        );
    }

    #[test]
    fn a_batch_settles_once_after_its_last_report() {
        let (sender, mut settled) = mpsc::unbounded_channel();
        let context = DeliveryContext::new("k", sender);
        let batch = Arc::new(InFlightBatch::new(
            EventKind::Cuda,
            crate::test_support::cuda_batch(3, 0).records,
            3,
        ));
        for row in 0..3 {
            let error = (row == 1).then_some(RDKafkaErrorCode::MessageTimedOut);
            context.settle(
                Delivery {
                    batch: batch.clone(),
                    rows: MessageRows::One(row),
                },
                error,
            );
            assert_eq!(settled.try_recv().is_ok(), row == 2);
        }
        let failures = batch.take_failures();
        assert_eq!(failures.len(), 1);
        assert!(matches!(failures[0].0, MessageRows::One(1)));
    }
}
