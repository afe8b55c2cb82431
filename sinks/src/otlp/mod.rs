//! OpenTelemetry logs: the event mapping shared by the OTLP sink and the Kafka `otlp_proto`
//! encoding.

pub mod mapping;

pub use mapping::{event_name, OtlpMapping};
