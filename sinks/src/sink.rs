//! The contract between the pipeline and a destination.
//!
//! A sink is built from its validated config, then `run` consumes batches from its bounded
//! queue ([`crate::queue`]) until the queue closes (shutdown), finishing everything it holds
//! before it returns. The queue counts what the sink was offered (received) and what the
//! policy dropped; the sink counts what it delivered (acknowledged: for Parquet, fsynced and
//! renamed into place) and what failed, so the agent can prove
//! `received = delivered + dropped + failed + spooled_pending + in_flight` for every sink.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use crate::queue::QueueReceiver;
// The counters moved to `stats` (which the queue uses without depending on this module); kept
// reachable here for callers that name them through `sink`.
pub use crate::stats::{DropReason, KindCounters, SinkStats};

/// Errors that end a sink's run.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    /// The destination could not be prepared (e.g. directory not writable).
    #[error("{sink}: cannot start: {reason}")]
    Start {
        /// Sink name.
        sink: String,
        /// What went wrong.
        reason: String,
    },
    /// The sink's worker thread or task died.
    #[error("{sink}: worker failed: {reason}")]
    Worker {
        /// Sink name.
        sink: String,
        /// What went wrong.
        reason: String,
    },
}

/// What a running sink consumes.
#[derive(Debug)]
pub struct SinkInput {
    /// Batches to deliver; closed by the pipeline at shutdown.
    pub batches: QueueReceiver,
    /// Where the sink counts its work.
    pub stats: Arc<SinkStats>,
}

/// The future a sink's run returns.
pub type SinkRun = Pin<Box<dyn Future<Output = Result<(), SinkError>> + Send>>;

/// Runs the body of a sink that does blocking work (file I/O, encoding) on the runtime's
/// blocking pool, handing it the runtime so it can await its queue; a panic in the body ends
/// the sink with a [`SinkError::Worker`].
pub async fn run_blocking(
    sink: String,
    body: impl FnOnce(tokio::runtime::Handle) + Send + 'static,
) -> Result<(), SinkError> {
    let handle = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || body(handle))
        .await
        .map_err(|err| SinkError::Worker {
            sink,
            reason: err.to_string(),
        })
}

/// A destination for event batches.
pub trait Sink: Send {
    /// Name used in logs and metrics (unique per agent).
    fn name(&self) -> &str;

    /// Delivers batches from `input` until it closes, then finishes everything it holds
    /// (closes files, waits for acknowledgements) and returns. Must be called inside a tokio
    /// runtime.
    fn run(self: Box<Self>, input: SinkInput) -> SinkRun;
}
