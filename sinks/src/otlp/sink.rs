//! The OTLP sink: batches become export requests of at most `batch_size` log records, up to
//! `concurrency` of them in flight. A record counts as delivered when its request succeeded;
//! records a partial success refused are dropped (`rejected`); a retryable failure hands the
//! rows back to the queue (retried with backoff, spooled when memory is full or at the
//! shutdown deadline); a permanent one counts them as failed. Every failure is counted by
//! label in `/metrics`; a retried export whose outcome is unknown (the collector may have kept
//! it) is also counted as `maybe_delivered`, since the retry may duplicate its records.

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::task::JoinSet;

use super::config::OtlpSinkConfig;
use super::mapping::OtlpMapping;
use super::transport::{Accepted, ExportError, Exporter, MAYBE_DELIVERED};
use crate::schema::HostIdentity;
use crate::sink::{Sink, SinkError, SinkInput, SinkRun};
use crate::stats::DropReason;
use crate::EventBatch;

/// The running OTLP sink.
pub struct OtlpSink {
    name: String,
    config: OtlpSinkConfig,
    identity: HostIdentity,
    host_id: Option<String>,
}

impl OtlpSink {
    /// Builds the sink; `host_id` (the machine id) becomes the resource's `host.id`.
    pub fn new(
        name: impl Into<String>,
        config: OtlpSinkConfig,
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

impl Sink for OtlpSink {
    fn name(&self) -> &str {
        &self.name
    }

    fn run(self: Box<Self>, input: SinkInput) -> SinkRun {
        Box::pin(async move {
            let start_error = |reason: String| SinkError::Start {
                sink: self.name.clone(),
                reason,
            };
            let headers = self.config.resolved_headers().map_err(start_error)?;
            let resource = self
                .config
                .resolved_resource_attributes()
                .map_err(start_error)?;
            let exporter = Exporter::new(&self.config, &headers).map_err(start_error)?;
            let mapping = OtlpMapping::new(&self.identity, self.host_id.as_deref(), &resource);
            tracing::info!(sink = %self.name, endpoint = %crate::secret::redact_url(&self.config.request_url()), protocol = ?self.config.protocol, "otlp sink started");
            Worker {
                name: self.name.clone(),
                exporter,
                mapping,
                batch_size: self.config.batch_size,
                concurrency: self.config.concurrency,
                in_flight: JoinSet::new(),
                requests: HashMap::new(),
            }
            .run(input)
            .await;
            Ok(())
        })
    }
}

struct Worker {
    name: String,
    exporter: Exporter,
    mapping: OtlpMapping,
    batch_size: usize,
    concurrency: usize,
    in_flight: JoinSet<Result<Accepted, ExportError>>,
    /// The rows of each request in flight, by task.
    requests: HashMap<tokio::task::Id, EventBatch>,
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

impl Worker {
    async fn run(&mut self, mut input: SinkInput) {
        let mut input_closed = false;
        // Requests of a batch not yet started (a batch is split into batch_size chunks).
        let mut pending: Vec<EventBatch> = Vec::new();
        let mut aborted_at_deadline = false;
        loop {
            while self.in_flight.len() < self.concurrency {
                let Some(chunk) = pending.pop() else { break };
                self.start(chunk);
            }
            let take_more =
                !input_closed && pending.is_empty() && self.in_flight.len() < self.concurrency;
            tokio::select! {
                biased;
                Some(done) = self.in_flight.join_next_with_id() => {
                    if self.settle(done, &input) {
                        input_closed = false;
                    }
                }
                next = input.batches.recv(), if take_more => match next {
                    Some(batch) => pending = self.chunks(batch),
                    None => input_closed = true,
                },
                _ = tokio::time::sleep(Duration::from_millis(100)) => {}
            }
            if input_closed && pending.is_empty() && self.in_flight.is_empty() {
                break;
            }
            let deadline_passed = input
                .batches
                .shutdown_deadline()
                .is_some_and(|deadline| Instant::now() >= deadline);
            if deadline_passed && !aborted_at_deadline && !self.in_flight.is_empty() {
                aborted_at_deadline = true;
                tracing::warn!(sink = %self.name, requests = self.in_flight.len(), "shutdown deadline: abandoning otlp requests in flight; their rows go to the spool");
                self.in_flight.abort_all();
            }
            if deadline_passed {
                for chunk in pending.drain(..).rev() {
                    input.batches.reject(chunk);
                }
            }
        }
        tracing::info!(sink = %self.name, "otlp sink finished");
    }

    /// Splits a batch into requests, last first (so `pop` takes them in order).
    fn chunks(&self, batch: EventBatch) -> Vec<EventBatch> {
        let rows = batch.len();
        let mut chunks: Vec<EventBatch> = (0..rows)
            .step_by(self.batch_size)
            .map(|offset| {
                let len = self.batch_size.min(rows - offset);
                EventBatch::new(batch.kind, batch.records.slice(offset, len))
            })
            .collect();
        chunks.reverse();
        chunks
    }

    fn start(&mut self, chunk: EventBatch) {
        let request = self
            .mapping
            .batch_request(chunk.kind, &chunk.records, now_ns());
        let exporter = self.exporter.clone();
        let handle = self
            .in_flight
            .spawn(async move { exporter.export(request).await });
        self.requests.insert(handle.id(), chunk);
    }

    /// Accounts one finished request. True when rows went back to the queue.
    fn settle(
        &mut self,
        done: Result<(tokio::task::Id, Result<Accepted, ExportError>), tokio::task::JoinError>,
        input: &SinkInput,
    ) -> bool {
        let (id, outcome) = match done {
            Ok((id, outcome)) => (id, outcome),
            Err(join_error) => (
                join_error.id(),
                // Abandoned in flight: the collector may have it already.
                Err(ExportError {
                    retryable: true,
                    maybe_delivered: true,
                    label: "shutdown_deadline".into(),
                    message: "request abandoned at the shutdown deadline".into(),
                }),
            ),
        };
        let Some(chunk) = self.requests.remove(&id) else {
            return false;
        };
        let (kind, rows) = (chunk.kind, chunk.len() as u64);
        let stats = &input.stats;
        match outcome {
            Ok(Accepted { rejected }) => {
                let rejected = rejected.min(rows);
                stats.delivered.add(kind, rows - rejected);
                if rejected > 0 {
                    stats.drop_events(DropReason::Rejected, kind, rejected);
                    stats.count_error("partial_success", rejected);
                    tracing::warn!(sink = %self.name, %kind, rejected, rows, "collector refused part of an export (partial success)");
                }
                input.batches.delivered();
                false
            }
            Err(error) if error.retryable => {
                stats.count_error(&error.label, rows);
                if error.maybe_delivered {
                    stats.count_error(MAYBE_DELIVERED, rows);
                    tracing::warn!(sink = %self.name, %kind, rows, %error, "otlp export failed with an unknown outcome; rows will be retried and the collector may receive them twice");
                } else {
                    tracing::warn!(sink = %self.name, %kind, rows, %error, "otlp export failed; rows will be retried");
                }
                input.batches.reject(chunk);
                true
            }
            Err(error) => {
                stats.count_error(&error.label, rows);
                stats.failed.add(kind, rows);
                tracing::error!(sink = %self.name, %kind, rows, %error, "collector refused the export for good; rows lost");
                false
            }
        }
    }
}

#[cfg(test)]
mod tests;
