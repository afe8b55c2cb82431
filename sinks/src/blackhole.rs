//! The `blackhole` sink: takes batches, optionally waits per batch, and discards them, counting
//! them as delivered. For measuring the pipeline without a destination's cost, and, with
//! `delay_ms`, for standing in for a slow destination.

use std::time::Duration;

use serde::Deserialize;

use crate::sink::{Sink, SinkInput, SinkRun};
use crate::sink_type::{owned_problems, BuildContext, RegisteredSinkType, SinkType};

/// `[[sinks]] type = "blackhole"`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct BlackholeSinkConfig {
    /// Milliseconds to wait per batch, as a slow destination would.
    #[serde(default)]
    pub delay_ms: u64,
}

impl BlackholeSinkConfig {
    /// Every problem with the values, as `(key, message)` pairs; empty when valid.
    pub fn problems(&self) -> Vec<(&'static str, String)> {
        crate::limits::out_of_range(self.delay_ms, 0..=60_000)
            .map(|message| ("delay_ms", message))
            .into_iter()
            .collect()
    }
}

impl SinkType for BlackholeSinkConfig {
    fn problems(&self) -> Vec<(String, String)> {
        owned_problems(BlackholeSinkConfig::problems(self))
    }

    fn build(&self, context: &BuildContext<'_>) -> Box<dyn Sink> {
        Box::new(BlackholeSink::new(context.name, self.clone()))
    }
}

impl RegisteredSinkType for BlackholeSinkConfig {
    const TYPE_NAME: &'static str = "blackhole";
}

/// The running blackhole sink.
pub struct BlackholeSink {
    name: String,
    config: BlackholeSinkConfig,
}

impl BlackholeSink {
    /// Builds the sink.
    pub fn new(name: impl Into<String>, config: BlackholeSinkConfig) -> Self {
        Self {
            name: name.into(),
            config,
        }
    }
}

impl Sink for BlackholeSink {
    fn name(&self) -> &str {
        &self.name
    }

    fn run(self: Box<Self>, mut input: SinkInput) -> SinkRun {
        Box::pin(async move {
            let delay = Duration::from_millis(self.config.delay_ms);
            while let Some(batch) = input.batches.recv().await {
                if !delay.is_zero() {
                    tokio::time::sleep(delay).await;
                }
                input.stats.delivered.add(batch.kind, batch.len() as u64);
                input.batches.delivered();
            }
            tracing::info!(sink = %self.name, "blackhole sink finished");
            Ok(())
        })
    }
}
