//! The jsonl sink's registration: validation, build and the start-up health check (the file,
//! or the folder it will be created in, is writable).

use super::{JsonlSink, JsonlSinkConfig};
use crate::sink::Sink;
use crate::sink_type::{
    owned_problems, writable, BuildContext, HealthCheck, RegisteredSinkType, SinkType,
};

impl SinkType for JsonlSinkConfig {
    fn problems(&self) -> Vec<(String, String)> {
        owned_problems(JsonlSinkConfig::problems(self))
    }

    fn build(&self, context: &BuildContext<'_>) -> Box<dyn Sink> {
        Box::new(JsonlSink::new(context.name, self.clone()))
    }

    fn health_check(&self) -> HealthCheck {
        let health = match self.file() {
            None => Ok("standard output".to_string()),
            Some(file) => writable(file),
        };
        Box::pin(async move { health })
    }
}

impl RegisteredSinkType for JsonlSinkConfig {
    const TYPE_NAME: &'static str = "jsonl";
}
