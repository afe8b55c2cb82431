//! The Kafka sink's registration: validation, the start-up read of its secrets, build, and
//! the health check (the cluster's metadata arrives within the timeout).

use rdkafka::producer::{BaseProducer, Producer};

use super::{KafkaSink, KafkaSinkConfig};
use crate::sink::Sink;
use crate::sink_type::{
    BuildContext, HealthCheck, RegisteredSinkType, SinkType, HEALTH_CHECK_TIMEOUT,
};

impl SinkType for KafkaSinkConfig {
    fn problems(&self) -> Vec<(String, String)> {
        KafkaSinkConfig::problems(self)
    }

    fn check_start(&self) -> Result<(), String> {
        KafkaSinkConfig::check_start(self)
    }

    fn build(&self, context: &BuildContext<'_>) -> Box<dyn Sink> {
        Box::new(KafkaSink::new(
            context.name,
            self.clone(),
            context.identity.clone(),
            context.host_id.map(str::to_string),
        ))
    }

    fn health_check(&self) -> HealthCheck {
        let client_config = self.client_config();
        Box::pin(async move {
            let client_config = client_config.map_err(|err| err.to_string())?;
            // librdkafka's metadata call blocks; it is bounded by its own timeout.
            tokio::task::spawn_blocking(move || {
                let producer: BaseProducer = client_config
                    .create()
                    .map_err(|err| format!("cannot create a client: {err}"))?;
                let metadata = producer
                    .client()
                    .fetch_metadata(None, HEALTH_CHECK_TIMEOUT)
                    .map_err(|err| format!("no cluster metadata: {err}"))?;
                Ok(format!(
                    "{} broker(s), {} topic(s)",
                    metadata.brokers().len(),
                    metadata.topics().len()
                ))
            })
            .await
            .map_err(|err| format!("check failed: {err}"))?
        })
    }
}

impl RegisteredSinkType for KafkaSinkConfig {
    const TYPE_NAME: &'static str = "kafka";
}
