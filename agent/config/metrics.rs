//! `[metrics]` and `[metrics.otlp]`: the endpoint Prometheus scrapes, and where the GPU-health
//! metrics are pushed over OTLP.

use serde::Deserialize;

use super::defaults;

/// `[metrics]`: Prometheus text on `/metrics`, readiness on `/health`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetricsConfig {
    /// Serve the endpoint.
    #[serde(default = "defaults::yes")]
    pub enabled: bool,
    /// Address to listen on (loopback by default; port 0 picks a free one, logged at start).
    #[serde(default = "defaults::metrics_address")]
    pub address: String,
    /// Connections open at once (1..=1024); when all are taken, the one waiting longest for
    /// its request is closed to make room (docs/operations.md).
    #[serde(default = "defaults::metrics_max_connections")]
    pub max_connections: usize,
    /// `[metrics.otlp]`: also push the GPU-health metrics to an OpenTelemetry collector.
    #[serde(default)]
    pub otlp: Option<OtlpMetricsConfig>,
}

/// `[metrics.otlp]`: where and how often the GPU-health metrics are pushed over OTLP. The
/// connection keys mean what they mean in an `otlp` sink.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OtlpMetricsConfig {
    /// Collector URL (`/v1/metrics` is appended to a bare host over HTTP).
    pub endpoint: String,
    /// `grpc` or `http/protobuf`.
    #[serde(default)]
    pub protocol: gpuship_sinks::otlp::OtlpProtocol,
    /// Request headers; values are never logged.
    #[serde(default)]
    pub headers: std::collections::BTreeMap<String, gpuship_sinks::otlp::config::HeaderValue>,
    /// Request compression.
    #[serde(default)]
    pub compression: gpuship_sinks::otlp::config::OtlpCompression,
    /// Seconds an export may take.
    #[serde(default = "defaults::otlp_metrics_timeout_secs")]
    pub timeout_secs: u64,
    /// TLS settings for `https://` endpoints.
    #[serde(default)]
    pub tls: Option<gpuship_sinks::tls::TlsConfig>,
    /// Resource attributes added to (or replacing) gpuship's own (`${env:NAME}` is read at
    /// start).
    #[serde(default)]
    pub resource_attributes: std::collections::BTreeMap<String, String>,
    /// Seconds between two exports (1..=3600). Series are cumulative: a failed export loses
    /// nothing, the next one carries the totals.
    #[serde(default = "defaults::otlp_metrics_interval_secs")]
    pub interval_secs: u64,
}

impl OtlpMetricsConfig {
    /// The connection settings in the form the OTLP transport takes.
    pub fn connection(&self) -> gpuship_sinks::otlp::OtlpSinkConfig {
        gpuship_sinks::otlp::OtlpSinkConfig {
            protocol: self.protocol,
            headers: self.headers.clone(),
            compression: self.compression,
            timeout_secs: self.timeout_secs,
            tls: self.tls.clone(),
            resource_attributes: self.resource_attributes.clone(),
            ..gpuship_sinks::otlp::OtlpSinkConfig::with_endpoint(self.endpoint.clone())
        }
    }
}
