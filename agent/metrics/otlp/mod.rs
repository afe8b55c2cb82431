//! Pushing the GPU-health metrics to an OpenTelemetry collector (`[metrics.otlp]`): every
//! `interval_secs` one `ExportMetricsServiceRequest` built from the live tap's counts
//! ([`mapping`]), sent over the OTLP sink's transport (gRPC or HTTP, TLS, headers, gzip), and a
//! last one at shutdown after the sources have drained, so an XID seen just before a stop
//! still reaches the collector.
//!
//! Why not the OpenTelemetry SDK's `opentelemetry-otlp` metrics exporter: it exports only what
//! the SDK's own instruments aggregated, and its data types cannot be built outside the SDK.
//! The kernel already aggregates stats-mode calls into histograms; feeding them through an
//! SDK histogram would mean one `record()` per call again, the per-call work stats mode
//! removed. The request here uses the same generated protocol types (`opentelemetry-proto`)
//! the SDK exporter uses, so the wire format is the same.

pub mod mapping;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use anyhow::Context;
use gpuship_sinks::otlp::proto::tonic::common::v1::InstrumentationScope;
use gpuship_sinks::otlp::proto::tonic::resource::v1::Resource;
use gpuship_sinks::otlp::transport::{Exporter, Signal};
use gpuship_sinks::otlp::OtlpMapping;
use gpuship_sinks::schema::HostIdentity;

use crate::config::OtlpMetricsConfig;
use crate::live::LiveTap;

/// Exports counted, for `/metrics` (`gpuship_otlp_metrics_exports_total`).
#[derive(Debug, Default)]
pub struct ExportCounters {
    /// Exports the collector accepted.
    pub succeeded: AtomicU64,
    /// Exports that failed (the next one carries the totals).
    pub failed: AtomicU64,
    /// Data points a collector refused in accepted exports (partial success).
    pub rejected_points: AtomicU64,
}

/// One agent's metrics exporter.
#[derive(Clone)]
pub struct MetricsExport {
    exporter: Exporter,
    resource: Resource,
    scope: InstrumentationScope,
    interval: Duration,
    endpoint: String,
    live: Arc<LiveTap>,
    /// What happened to the exports.
    pub counters: Arc<ExportCounters>,
}

impl MetricsExport {
    /// Prepares the exporter (nothing is dialled until the first export). Errors name what
    /// cannot be read: a header secret, a TLS file.
    pub fn new(
        config: &OtlpMetricsConfig,
        identity: &HostIdentity,
        host_id: Option<&str>,
        live: Arc<LiveTap>,
    ) -> anyhow::Result<Self> {
        let connection = config.connection();
        let headers = connection
            .resolved_headers()
            .map_err(anyhow::Error::msg)
            .context("[metrics.otlp] headers")?;
        let attributes = connection
            .resolved_resource_attributes()
            .map_err(anyhow::Error::msg)
            .context("[metrics.otlp] resource_attributes")?;
        let exporter = Exporter::for_signal(&connection, &headers, Signal::Metrics)
            .map_err(anyhow::Error::msg)
            .context("[metrics.otlp]")?;
        let mapping = OtlpMapping::new(identity, host_id, &attributes);
        Ok(Self {
            exporter,
            resource: mapping.resource().clone(),
            scope: mapping.scope().clone(),
            interval: Duration::from_secs(config.interval_secs),
            endpoint: gpuship_sinks::secret::redact_url(
                &connection.signal_url(Signal::Metrics.http_path()),
            ),
            live,
            counters: Arc::new(ExportCounters::default()),
        })
    }

    /// Sends the counts as they are now; failures are logged and counted.
    pub async fn export_now(&self) -> bool {
        let request = mapping::metrics_request(
            &self.live.health(),
            SystemTime::now(),
            &self.resource,
            &self.scope,
        );
        match self.exporter.export_metrics(request).await {
            Ok(accepted) => {
                self.counters.succeeded.fetch_add(1, Ordering::Relaxed);
                if accepted.rejected > 0 {
                    self.counters
                        .rejected_points
                        .fetch_add(accepted.rejected, Ordering::Relaxed);
                    tracing::warn!(
                        endpoint = %self.endpoint,
                        rejected = accepted.rejected,
                        "the collector refused some metric data points"
                    );
                }
                true
            }
            Err(err) => {
                let failed = self.counters.failed.fetch_add(1, Ordering::Relaxed) + 1;
                // The first failure and then one in a hundred: an outage is not a log flood.
                if failed == 1 || failed.is_multiple_of(100) {
                    tracing::warn!(
                        endpoint = %self.endpoint,
                        error = %err,
                        failed,
                        "metrics export failed; the next export carries the totals"
                    );
                }
                false
            }
        }
    }

    /// Exports every interval, forever (the task is dropped with the runtime).
    pub async fn run(self) {
        tracing::info!(
            endpoint = %self.endpoint,
            interval_secs = self.interval.as_secs(),
            "exporting GPU-health metrics over OTLP"
        );
        let mut ticks = tokio::time::interval(self.interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // The first tick is immediate: skip it, nothing is counted yet.
        ticks.tick().await;
        loop {
            ticks.tick().await;
            self.export_now().await;
        }
    }
}

#[cfg(test)]
mod tests;
