//! The Kafka sink: events as messages on a topic per kind, through an idempotent librdkafka
//! producer with `acks=all`.
//!
//! An event counts as delivered only when the broker acknowledged its message (the delivery
//! report). Sending never waits for a report: messages go to the producer's queue, and the
//! reports settle whole batches as they come back ([`delivery`]). Rows of messages that failed
//! in a way a later attempt can fix go back to the sink's queue, which retries them with backoff
//! and spools what does not fit (and, at the shutdown deadline, everything still in flight);
//! rows the broker will never take are counted as failed. Every failure is counted by error in
//! `/metrics`.

pub mod config;
pub mod delivery;
pub mod messages;
pub mod security;
mod sink_type;

mod worker;

pub use config::{KafkaCompression, KafkaSinkConfig};

use crate::schema::HostIdentity;
use crate::sink::{Sink, SinkInput, SinkRun};
use worker::Worker;
#[cfg(test)]
use worker::{topics, KindRoute};

/// The running Kafka sink.
pub struct KafkaSink {
    name: String,
    config: KafkaSinkConfig,
    identity: HostIdentity,
    host_id: Option<String>,
}

impl KafkaSink {
    /// Builds the sink; `host_id` (the machine id) goes into the `otlp_proto` resource.
    pub fn new(
        name: impl Into<String>,
        config: KafkaSinkConfig,
        identity: HostIdentity,
        host_id: Option<String>,
    ) -> Self {
        Self {
            name: name.into(),
            config,
            identity,
            host_id,
        }
    }
}

impl Sink for KafkaSink {
    fn name(&self) -> &str {
        &self.name
    }

    fn run(self: Box<Self>, input: SinkInput) -> SinkRun {
        Box::pin(async move {
            let mut worker = Worker::start(*self)?;
            worker.run(input).await;
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests;
