//! Turning record batches into bytes for sinks that ship messages rather than files.
//!
//! - [`json`]: one JSON object per event, keyed by the Parquet column names (Kafka `json`
//!   encoding, the `jsonl` sink).
//! - [`arrow_ipc`]: one self-contained Arrow IPC stream per batch (Kafka `arrow_ipc`).
//!
//! The OTLP encoding lives with the OTLP mapping in [`crate::otlp`].

pub mod arrow_ipc;
pub mod json;

use serde::Deserialize;

/// How a message sink encodes events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Encoding {
    /// One JSON object per event (default).
    #[default]
    Json,
    /// One Arrow IPC stream (schema + one record batch) per message.
    ArrowIpc,
    /// One OTLP `ExportLogsServiceRequest` (protobuf) per message.
    OtlpProto,
}

impl Encoding {
    /// The value of the `encoding` header and of config files.
    pub fn as_str(self) -> &'static str {
        match self {
            Encoding::Json => "json",
            Encoding::ArrowIpc => "arrow_ipc",
            Encoding::OtlpProto => "otlp_proto",
        }
    }

    /// MIME type of one message's payload.
    pub fn content_type(self) -> &'static str {
        match self {
            Encoding::Json => "application/json",
            Encoding::ArrowIpc => "application/vnd.apache.arrow.stream",
            Encoding::OtlpProto => "application/x-protobuf",
        }
    }

    /// Whether one message carries one event (else one message carries many).
    pub fn per_event(self) -> bool {
        matches!(self, Encoding::Json)
    }
}
