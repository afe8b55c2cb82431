//! Builds running sinks from their config: the one place a new sink type is registered. Also
//! where a sink that cannot start, or stops with an error, is made an error of the run.

use std::sync::Arc;

use gpuship_sinks::blackhole::BlackholeSink;
use gpuship_sinks::jsonl::JsonlSink;
use gpuship_sinks::kafka::KafkaSink;
use gpuship_sinks::otlp::OtlpSink;
use gpuship_sinks::parquet::ParquetSink;
use gpuship_sinks::schema::HostIdentity;
use gpuship_sinks::sink::SinkRun;
use gpuship_sinks::{Sink, SinkStats};

pub use crate::config::sink_names;
use crate::config::SinkConfig;

/// The running sink for one `[[sinks]]` entry; `host_id` is the machine id, for sinks that
/// describe the host (OTLP resources).
pub fn build_sink(
    name: &str,
    config: &SinkConfig,
    identity: &HostIdentity,
    host_id: Option<&str>,
) -> Box<dyn Sink> {
    match config {
        SinkConfig::Jsonl(jsonl) => Box::new(JsonlSink::new(name, jsonl.clone())),
        SinkConfig::Otlp(otlp) => Box::new(OtlpSink::new(
            name,
            otlp.clone(),
            identity.clone(),
            host_id.map(str::to_string),
        )),
        SinkConfig::Kafka(kafka) => Box::new(KafkaSink::new(
            name,
            (**kafka).clone(),
            identity.clone(),
            host_id.map(str::to_string),
        )),
        SinkConfig::Blackhole(blackhole) => Box::new(BlackholeSink::new(name, blackhole.clone())),
        SinkConfig::Parquet(parquet) => {
            Box::new(ParquetSink::new(name, parquet.clone(), &*identity.host))
        }
    }
}

/// Reads and checks what a sink needs at start (secrets, header values, `${env:NAME}`
/// values, TLS files), so that a sink that cannot start stops `gpuship run` before capture
/// begins, with its name, instead of taking no events while the agent looks healthy.
pub fn check_start(config: &SinkConfig) -> Result<(), String> {
    match config {
        SinkConfig::Otlp(otlp) => otlp.check_start(),
        SinkConfig::Kafka(kafka) => kafka.check_start(),
        SinkConfig::Parquet(_) | SinkConfig::Jsonl(_) | SinkConfig::Blackhole(_) => Ok(()),
    }
}

/// A sink's run, made loud: a sink whose run ends with an error (it could not start, or its
/// worker died) says so at once, at error level, and reports itself unhealthy in `/metrics`
/// (`gpuship_sink_healthy 0`), rather than only at shutdown. The run then ends non-zero.
pub async fn watched(
    name: String,
    stats: Arc<SinkStats>,
    run: SinkRun,
) -> Result<(), gpuship_sinks::SinkError> {
    let result = run.await;
    if let Err(err) = &result {
        stats.set_healthy(false);
        tracing::error!(sink = %name, %err, "sink stopped: it delivers nothing more; gpuship run will exit with status 1");
    }
    result
}
