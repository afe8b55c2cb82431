//! Self-metrics: Prometheus (OpenMetrics) text on `/metrics`, a readiness answer on `/health`
//! and the live view's JSON on `/live` (read by `gpuship top`), served on loopback by default.
//! The endpoint serves a scraper, a probe and `top`, nothing else: GET only, one request per
//! connection, bounded connections and timeouts (`server`); the text is rendered from one
//! accounting snapshot per scrape (`render`).

mod health_render;
mod health_table;
pub mod otlp;
mod render;
mod server;

use std::sync::atomic::{AtomicU8, Ordering};

use anyhow::Context;
use tokio::net::TcpListener;

use crate::config::MetricsConfig;

pub use health_table::HEALTH_FAMILIES;
pub use render::{render, BUDGET_FAMILIES, CONTENT_TYPE, LIBRARY_FAMILIES, RELOAD_FAMILIES};
pub use server::{serve, Limits, Served, ACCEPT_ERROR_PAUSE};

/// Lifecycle state reported by `/health`.
#[derive(Debug)]
pub struct Health(AtomicU8);

impl Default for Health {
    fn default() -> Self {
        Self(AtomicU8::new(Self::STARTING))
    }
}

impl Health {
    const STARTING: u8 = 0;
    const RUNNING: u8 = 1;
    const DRAINING: u8 = 2;

    /// Capture is running.
    pub fn set_running(&self) {
        self.0.store(Self::RUNNING, Ordering::Release);
    }

    /// Shutdown has begun.
    pub fn set_draining(&self) {
        self.0.store(Self::DRAINING, Ordering::Release);
    }

    /// HTTP status and body for `/health`.
    pub fn answer(&self) -> (u16, &'static str) {
        match self.0.load(Ordering::Acquire) {
            Self::RUNNING => (200, "ok\n"),
            Self::DRAINING => (503, "draining\n"),
            _ => (503, "starting\n"),
        }
    }
}

/// `/health`: the lifecycle (503 while starting or draining), and while running 503 with the
/// names of the sinks that are failing or stalled (their events go to the spool meanwhile), so
/// a readiness probe and an operator see a destination outage; 200 `ok` otherwise.
pub fn health_answer(health: &Health, accounting: &crate::accounting::Accounting) -> (u16, String) {
    let (status, body) = health.answer();
    if status != 200 {
        return (status, body.to_string());
    }
    let running = accounting.sinks();
    let unhealthy: Vec<&str> = running
        .iter()
        .filter(|(_, stats)| !stats.healthy())
        .map(|(name, _)| name.as_str())
        .collect();
    if unhealthy.is_empty() {
        // Capture that misses processes is worth a look but not an outage: the agent stays
        // ready (its metrics are how an operator sees it).
        if let Some(reason) = accounting.libraries.degraded() {
            return (200, format!("degraded: {reason}\n"));
        }
        return (200, body.to_string());
    }
    (
        503,
        format!("unhealthy sinks (spooling): {}\n", unhealthy.join(", ")),
    )
}

/// Binds `[metrics] address` when the endpoint is enabled. An address that cannot be bound
/// (in use, not local, no permission) is a start error: an agent that answers no probe would
/// be restarted or scraped in vain while looking healthy to itself.
pub fn bind(
    config: &MetricsConfig,
    runtime: &tokio::runtime::Runtime,
) -> anyhow::Result<Option<TcpListener>> {
    if !config.enabled {
        return Ok(None);
    }
    let address = &config.address;
    let listener = runtime
        .block_on(TcpListener::bind(address))
        .with_context(|| {
            format!(
                "cannot serve metrics on {address} (another process holds the port?); \
                 set [metrics] address to a free one, or enabled = false"
            )
        })?;
    let bound = listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_else(|_| address.clone());
    tracing::info!(
        address = %bound,
        max_connections = config.max_connections,
        "metrics listening on /metrics, /health and /live"
    );
    Ok(Some(listener))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn health_names_unhealthy_sinks_while_running() {
        let health = Health::default();
        let accounting = crate::accounting::Accounting::default();
        let stats = std::sync::Arc::new(gpuship_sinks::SinkStats::default());
        accounting.add_sink("kafka", stats.clone(), false);
        health.set_running();
        assert_eq!(health_answer(&health, &accounting), (200, "ok\n".into()));
        stats.set_healthy(false);
        assert_eq!(
            health_answer(&health, &accounting),
            (503, "unhealthy sinks (spooling): kafka\n".into())
        );
        health.set_draining();
        assert_eq!(
            health_answer(&health, &accounting),
            (503, "draining\n".into())
        );
    }

    #[test]
    fn health_follows_the_lifecycle() {
        let health = Health::default();
        assert_eq!(health.answer(), (503, "starting\n"));
        health.set_running();
        assert_eq!(health.answer(), (200, "ok\n"));
        health.set_draining();
        assert_eq!(health.answer(), (503, "draining\n"));
    }
}
