//! OpenTelemetry logs: the OTLP sink (gRPC or HTTP to a collector) and the event mapping it
//! shares with the Kafka `otlp_proto` encoding.

pub mod attributes;
pub mod config;
pub mod mapping;
mod metrics_export;
pub mod sink;
mod sink_type;
pub mod transport;

pub use config::{OtlpProtocol, OtlpSinkConfig};
pub use mapping::{event_name, OtlpMapping};
/// The generated OTLP protocol types, for the agent's metrics.
pub use opentelemetry_proto as proto;
pub use sink::OtlpSink;
