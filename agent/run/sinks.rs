//! Builds running sinks from their config through their [`gpuship_sinks::SinkType`] (registered in
//! `config::sinks`), checks each destination at start, and makes a sink that cannot start, or
//! stops with an error, an error of the run.

use std::sync::Arc;

use gpuship_sinks::schema::HostIdentity;
use gpuship_sinks::sink::SinkRun;
use gpuship_sinks::sink_type::{Health, HealthCheck};
use gpuship_sinks::{BuildContext, Sink, SinkInput, SinkStats};

pub use crate::config::sink_names;
use crate::config::SinkConfig;

/// The running sink for one `[[sinks]]` entry; `host_id` is the machine id, for sinks that
/// describe the host (OTLP resources). The sink checks its destination when it starts
/// ([`gpuship_sinks::SinkType::health_check`]) and logs what it found; a failed check is a warning, not an
/// error: the queue and spool keep the events until the destination answers.
pub fn build_sink(
    name: &str,
    config: &SinkConfig,
    identity: &HostIdentity,
    host_id: Option<&str>,
) -> Box<dyn Sink> {
    let sink_type = config.sink_type();
    let context = BuildContext {
        name,
        identity,
        host_id,
    };
    Box::new(HealthChecked {
        inner: sink_type.build(&context),
        type_name: config.type_name(),
        check: sink_type.health_check(),
    })
}

/// Reads and checks what a sink needs at start (secrets, header values, `${env:NAME}`
/// values, TLS files), so that a sink that cannot start stops `gpuship run` before capture
/// begins, with its name, instead of taking no events while the agent looks healthy.
pub fn check_start(config: &SinkConfig) -> Result<(), String> {
    config.sink_type().check_start()
}

/// Every sink's start check, as `gpuship run` makes it before capture begins: the sinks that
/// would not start, as `sink NAME cannot start: why` lines (empty when all would).
pub fn start_problems(config: &crate::config::Config) -> Vec<String> {
    sink_names(&config.sinks)
        .iter()
        .zip(&config.sinks)
        .filter_map(|(name, entry)| {
            check_start(&entry.sink)
                .err()
                .map(|reason| format!("sink {name} cannot start: {reason}"))
        })
        .collect()
}

/// Every sink's start check and destination health check, run now (concurrently, each within
/// its timeout): `(sink name, type, outcome)`, for `gpuship doctor`. Creates nothing.
pub fn check_sinks(config: &crate::config::Config) -> Vec<(String, &'static str, Health)> {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            let reason = format!("cannot start a runtime for the checks: {err}");
            return sink_names(&config.sinks)
                .into_iter()
                .zip(&config.sinks)
                .map(|(name, entry)| (name, entry.sink.type_name(), Err(reason.clone())))
                .collect();
        }
    };
    runtime.block_on(async {
        let checks: Vec<_> = sink_names(&config.sinks)
            .into_iter()
            .zip(&config.sinks)
            .map(|(name, entry)| {
                let sink_type = entry.sink.sink_type();
                let started = sink_type.check_start();
                let health = sink_type.health_check();
                let task = tokio::spawn(async move {
                    started.map_err(|reason| format!("cannot start: {reason}"))?;
                    health.await
                });
                (name, entry.sink.type_name(), task)
            })
            .collect();
        let mut outcomes = Vec::new();
        for (name, type_name, task) in checks {
            let health = task
                .await
                .unwrap_or_else(|err| Err(format!("check failed: {err}")));
            outcomes.push((name, type_name, health));
        }
        outcomes
    })
}

/// A sink whose run first starts its destination's health check beside it.
struct HealthChecked {
    inner: Box<dyn Sink>,
    type_name: &'static str,
    check: HealthCheck,
}

impl Sink for HealthChecked {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn run(self: Box<Self>, input: SinkInput) -> SinkRun {
        let HealthChecked {
            inner,
            type_name,
            check,
        } = *self;
        let name = inner.name().to_string();
        let run = inner.run(input);
        Box::pin(async move {
            // Beside the sink, not before it: a slow destination does not delay delivery.
            tokio::spawn(report_health(name, type_name, check));
            run.await
        })
    }
}

/// Logs one structured line with the outcome of a sink's health check.
async fn report_health(sink: String, sink_type: &'static str, check: HealthCheck) {
    match check.await {
        Ok(detail) => {
            tracing::info!(sink = %sink, r#type = sink_type, healthy = true, %detail, "sink health check passed")
        }
        Err(problem) => {
            tracing::warn!(sink = %sink, r#type = sink_type, healthy = false, %problem, "sink health check failed: events are queued and spooled until the destination answers")
        }
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
