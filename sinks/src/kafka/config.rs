//! `[[sinks]] type = "kafka"`: what users set, how it is checked, and the librdkafka
//! configuration it becomes. Settings that make delivery mean "acknowledged" (idempotence,
//! `acks=all`) are ours and cannot be overridden through `librdkafka_options`.

use std::collections::BTreeMap;

use rdkafka::ClientConfig;
use serde::Deserialize;

use super::security::{self, KafkaSasl};
use crate::encode::Encoding;
use crate::limits::{out_of_range, secs_to_millis};
use crate::secret::SecretError;
use crate::template::Template;
use crate::tls::TlsConfig;

/// Placeholders a topic template may use (constant per kind).
pub const TOPIC_PLACEHOLDERS: &[&str] = &["kind", "host"];

/// Placeholders a key template may use: `{kind}` and the columns of any kind.
pub const KEY_PLACEHOLDERS: &[&str] = &[
    "kind",
    "host",
    "boot_id",
    "pci_bus_id",
    "gpu_uuid",
    "gpu_index",
    "pid",
    "tid",
    "comm",
    "code",
    "function",
    "source",
];

/// Message compression.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum KafkaCompression {
    /// zstd (default).
    #[default]
    Zstd,
    /// lz4.
    Lz4,
    /// snappy.
    Snappy,
    /// gzip.
    Gzip,
    /// None.
    None,
}

impl KafkaCompression {
    fn as_librdkafka(self) -> &'static str {
        match self {
            KafkaCompression::Zstd => "zstd",
            KafkaCompression::Lz4 => "lz4",
            KafkaCompression::Snappy => "snappy",
            KafkaCompression::Gzip => "gzip",
            KafkaCompression::None => "none",
        }
    }
}

/// `[sinks.batch]`: how the producer groups messages into requests.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaBatch {
    /// How long the producer waits to fill a request (`linger.ms`).
    #[serde(default = "defaults::linger_ms")]
    pub linger_ms: u64,
    /// Bytes per partition request at most (`batch.size`).
    #[serde(default = "defaults::max_bytes")]
    pub max_bytes: u64,
    /// Messages per partition request at most (`batch.num.messages`).
    #[serde(default = "defaults::max_messages")]
    pub max_messages: u64,
    /// Rows per message at most for the batch encodings (`arrow_ipc`, `otlp_proto`); a
    /// message is split further if it would exceed `max_message_bytes`.
    #[serde(default = "defaults::max_rows_per_message")]
    pub max_rows_per_message: usize,
    /// Encoded bytes per message at most (keep below the broker's `message.max.bytes`).
    #[serde(default = "defaults::max_message_bytes")]
    pub max_message_bytes: usize,
}

impl Default for KafkaBatch {
    fn default() -> Self {
        Self {
            linger_ms: defaults::linger_ms(),
            max_bytes: defaults::max_bytes(),
            max_messages: defaults::max_messages(),
            max_rows_per_message: defaults::max_rows_per_message(),
            max_message_bytes: defaults::max_message_bytes(),
        }
    }
}

/// `[[sinks]] type = "kafka"`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaSinkConfig {
    /// Bootstrap brokers, `host:port[,host:port...]`.
    pub brokers: String,
    /// Topic template; `{kind}` and `{host}` are replaced.
    #[serde(default = "defaults::topic")]
    pub topic: String,
    /// Message key template: `{kind}` and column names (`{host}/{pci_bus_id}` keeps one GPU's
    /// events in order on one partition); columns a kind lacks render empty.
    #[serde(default = "defaults::key")]
    pub key: String,
    /// Payload encoding.
    #[serde(default)]
    pub encoding: Encoding,
    /// Compression.
    #[serde(default)]
    pub compression: KafkaCompression,
    /// Producer batching.
    #[serde(default)]
    pub batch: KafkaBatch,
    /// A message not acknowledged within this time fails (and is retried by gpuship, then
    /// spooled) (`message.timeout.ms`).
    #[serde(default = "defaults::delivery_timeout_secs")]
    pub delivery_timeout_secs: u64,
    /// Messages held by the producer at most (`queue.buffering.max.messages`); beyond it the
    /// sink stops taking batches and its queue's `when_full` policy applies.
    #[serde(default = "defaults::max_in_flight_messages")]
    pub max_in_flight_messages: u64,
    /// Bytes held by the producer at most, in KiB (`queue.buffering.max.kbytes`).
    #[serde(default = "defaults::max_in_flight_kbytes")]
    pub max_in_flight_kbytes: u64,
    /// TLS to the brokers.
    #[serde(default)]
    pub tls: Option<TlsConfig>,
    /// SASL authentication.
    #[serde(default)]
    pub sasl: Option<KafkaSasl>,
    /// Resource attributes added for the `otlp_proto` encoding.
    #[serde(default)]
    pub resource_attributes: BTreeMap<String, String>,
    /// Other librdkafka properties, passed through (those gpuship sets itself are refused).
    #[serde(default)]
    pub librdkafka_options: BTreeMap<String, String>,
}

mod defaults {
    pub fn topic() -> String {
        "gpuship.{kind}".into()
    }
    pub fn key() -> String {
        "{host}/{pci_bus_id}".into()
    }
    pub fn linger_ms() -> u64 {
        5
    }
    pub fn max_bytes() -> u64 {
        1 << 20
    }
    pub fn max_messages() -> u64 {
        10_000
    }
    pub fn max_rows_per_message() -> usize {
        2_000
    }
    pub fn max_message_bytes() -> usize {
        900_000
    }
    pub fn delivery_timeout_secs() -> u64 {
        30
    }
    pub fn max_in_flight_messages() -> u64 {
        50_000
    }
    pub fn max_in_flight_kbytes() -> u64 {
        16 * 1024
    }
}

/// librdkafka properties gpuship sets itself, and which setting owns each.
const RESERVED: &[(&str, &str)] = &[
    ("bootstrap.servers", "`brokers`"),
    ("metadata.broker.list", "`brokers`"),
    (
        "enable.idempotence",
        "acknowledged, ordered delivery (always on)",
    ),
    ("acks", "acknowledged delivery (always acks=all)"),
    (
        "request.required.acks",
        "acknowledged delivery (always acks=all)",
    ),
    (
        "max.in.flight.requests.per.connection",
        "idempotent delivery",
    ),
    ("max.in.flight", "idempotent delivery"),
    ("message.send.max.retries", "idempotent delivery"),
    ("retries", "idempotent delivery"),
    ("compression.type", "`compression`"),
    ("compression.codec", "`compression`"),
    ("linger.ms", "`batch.linger_ms`"),
    ("queue.buffering.max.ms", "`batch.linger_ms`"),
    ("batch.size", "`batch.max_bytes`"),
    ("batch.num.messages", "`batch.max_messages`"),
    ("message.timeout.ms", "`delivery_timeout_secs`"),
    ("delivery.timeout.ms", "`delivery_timeout_secs`"),
    ("queue.buffering.max.messages", "`max_in_flight_messages`"),
    ("queue.buffering.max.kbytes", "`max_in_flight_kbytes`"),
    ("security.protocol", "`tls` / `sasl`"),
];

impl KafkaSinkConfig {
    /// A config with every default and the given brokers.
    pub fn with_brokers(brokers: impl Into<String>) -> Self {
        Self {
            brokers: brokers.into(),
            topic: defaults::topic(),
            key: defaults::key(),
            encoding: Encoding::default(),
            compression: KafkaCompression::default(),
            batch: KafkaBatch::default(),
            delivery_timeout_secs: defaults::delivery_timeout_secs(),
            max_in_flight_messages: defaults::max_in_flight_messages(),
            max_in_flight_kbytes: defaults::max_in_flight_kbytes(),
            tls: None,
            sasl: None,
            resource_attributes: BTreeMap::new(),
            librdkafka_options: BTreeMap::new(),
        }
    }

    /// The parsed topic template.
    pub fn topic_template(&self) -> Result<Template, String> {
        Template::parse(&self.topic, TOPIC_PLACEHOLDERS).map_err(|e| e.to_string())
    }

    /// The parsed key template.
    pub fn key_template(&self) -> Result<Template, String> {
        Template::parse(&self.key, KEY_PLACEHOLDERS).map_err(|e| e.to_string())
    }

    /// Every problem with the values, as `(key, message)` pairs; empty when valid.
    pub fn problems(&self) -> Vec<(String, String)> {
        let mut problems = Vec::new();
        let mut problem = |key: &str, message: String| problems.push((key.to_string(), message));
        if self.brokers.trim().is_empty() {
            problem("brokers", "must name at least one host:port".into());
        }
        if let Err(err) = self.topic_template() {
            problem("topic", err);
        }
        if let Err(err) = self.key_template() {
            problem("key", err);
        }
        // librdkafka's own limits bound most of these (linger.ms <= 900000, batch.size and
        // queue.buffering.max.kbytes < 2^31, batch.num.messages <= 1000000,
        // message.max.bytes <= 1000000000).
        let batch = &self.batch;
        for (key, value, range) in [
            ("batch.linger_ms", batch.linger_ms, 0..=900_000),
            ("batch.max_bytes", batch.max_bytes, 1..=2_147_483_647),
            ("batch.max_messages", batch.max_messages, 1..=1_000_000),
            (
                "batch.max_rows_per_message",
                batch.max_rows_per_message as u64,
                1..=1_000_000,
            ),
            (
                "batch.max_message_bytes",
                batch.max_message_bytes as u64,
                1..=1_000_000_000,
            ),
            (
                "delivery_timeout_secs",
                self.delivery_timeout_secs,
                1..=86_400,
            ),
            (
                "max_in_flight_messages",
                self.max_in_flight_messages,
                1..=10_000_000,
            ),
            (
                "max_in_flight_kbytes",
                self.max_in_flight_kbytes,
                1..=2_147_483_647,
            ),
        ] {
            if let Some(message) = out_of_range(value, range) {
                problem(key, message);
            }
        }
        for option in self.librdkafka_options.keys() {
            let reserved = RESERVED
                .iter()
                .find(|(name, _)| name == option)
                .map(|(_, owner)| *owner)
                .or_else(|| {
                    (option.starts_with("ssl.") || option.starts_with("sasl."))
                        .then_some("`tls` / `sasl` (secrets come from the environment or a file)")
                });
            if let Some(owner) = reserved {
                problem(
                    &format!("librdkafka_options.\"{option}\""),
                    format!("conflicts with gpuship's own setting: {owner}"),
                );
            }
        }
        if let Some(sasl) = &self.sasl {
            if let Some(err) = sasl.password.problem() {
                problem("sasl.password", err);
            }
            if sasl.username.is_empty() {
                problem("sasl.username", "must not be empty".into());
            }
        }
        if let Some(tls) = &self.tls {
            for (key, message) in tls.problems() {
                problem(&key, message);
            }
        }
        problems
    }

    /// What the sink reads at start (its secrets), read now: the agent calls it before it
    /// starts capturing, so a sink that could not start is an error at start.
    pub fn check_start(&self) -> Result<(), String> {
        self.client_config()
            .map(drop)
            .map_err(|err| err.to_string())
    }

    /// The librdkafka configuration; reads secrets now.
    pub fn client_config(&self) -> Result<ClientConfig, SecretError> {
        let mut config = ClientConfig::new();
        for (key, value) in &self.librdkafka_options {
            config.set(key, value);
        }
        config
            .set("bootstrap.servers", &self.brokers)
            .set("enable.idempotence", "true")
            .set("acks", "all")
            .set("compression.type", self.compression.as_librdkafka())
            .set("linger.ms", self.batch.linger_ms.to_string())
            .set("batch.size", self.batch.max_bytes.to_string())
            .set("batch.num.messages", self.batch.max_messages.to_string())
            .set(
                "message.timeout.ms",
                secs_to_millis(self.delivery_timeout_secs).to_string(),
            )
            .set(
                "queue.buffering.max.messages",
                self.max_in_flight_messages.to_string(),
            )
            .set(
                "queue.buffering.max.kbytes",
                self.max_in_flight_kbytes.to_string(),
            );
        security::apply(self.tls.as_ref(), self.sasl.as_ref(), &mut config)?;
        Ok(config)
    }
}

#[cfg(test)]
mod tests;
