//! Self-metrics: Prometheus (OpenMetrics) text on `/metrics`, a readiness answer on `/health`
//! and the live view's JSON on `/live` (read by `gpuship top`), served on loopback by default.
//! The endpoint serves a scraper, a probe and `top`, nothing else: GET only, one request per
//! connection, bounded connections and timeouts (`server`); the text is rendered from one
//! accounting snapshot per scrape (`render`).

mod render;
mod server;

use std::sync::atomic::{AtomicU8, Ordering};

use anyhow::Context;
use tokio::net::TcpListener;

use crate::config::MetricsConfig;

pub use render::{render, CONTENT_TYPE};
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
    fn health_follows_the_lifecycle() {
        let health = Health::default();
        assert_eq!(health.answer(), (503, "starting\n"));
        health.set_running();
        assert_eq!(health.answer(), (200, "ok\n"));
        health.set_draining();
        assert_eq!(health.answer(), (503, "draining\n"));
    }
}
