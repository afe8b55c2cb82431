//! The OTLP sink's registration: validation, failed CUDA calls only by default, the start-up
//! read of its secrets, build, and the health check (the endpoint accepts a connection).

use super::{OtlpSink, OtlpSinkConfig};
use crate::sink::Sink;
use crate::sink_type::{
    host_port, tcp_reachable, BuildContext, DefaultCudaRows, HealthCheck, RegisteredSinkType,
    SinkType,
};

impl SinkType for OtlpSinkConfig {
    fn problems(&self) -> Vec<(String, String)> {
        OtlpSinkConfig::problems(self)
    }

    /// OTLP, the costliest sink per event, takes failed calls only.
    fn default_cuda_rows(&self) -> DefaultCudaRows {
        DefaultCudaRows::FailedOnly
    }

    fn check_start(&self) -> Result<(), String> {
        OtlpSinkConfig::check_start(self)
    }

    fn build(&self, context: &BuildContext<'_>) -> Box<dyn Sink> {
        Box::new(OtlpSink::new(
            context.name,
            self.clone(),
            context.identity.clone(),
            context.host_id.map(str::to_string),
        ))
    }

    fn health_check(&self) -> HealthCheck {
        let endpoint = self.endpoint.clone();
        Box::pin(async move {
            let address = host_port(&endpoint)
                .ok_or_else(|| format!("endpoint {endpoint:?} names no host"))?;
            tcp_reachable(address).await
        })
    }
}

impl RegisteredSinkType for OtlpSinkConfig {
    const TYPE_NAME: &'static str = "otlp";
}
