//! The jsonl sink's registration: validation, build and the start-up health check (the file
//! can be opened for appending, as the sink will).

use std::fs::OpenOptions;
use std::os::unix::fs::OpenOptionsExt;

use super::{JsonlSink, JsonlSinkConfig};
use crate::sink::Sink;
use crate::sink_type::{
    owned_problems, within_timeout, BuildContext, HealthCheck, RegisteredSinkType, SinkType,
};

impl SinkType for JsonlSinkConfig {
    fn problems(&self) -> Vec<(String, String)> {
        owned_problems(JsonlSinkConfig::problems(self))
    }

    fn build(&self, context: &BuildContext<'_>) -> Box<dyn Sink> {
        Box::new(JsonlSink::new(context.name, self.clone()))
    }

    fn health_check(&self) -> HealthCheck {
        let file = self.file().map(std::path::Path::to_path_buf);
        Box::pin(within_timeout(async move {
            let Some(file) = file else {
                return Ok("standard output".to_string());
            };
            tokio::task::spawn_blocking(move || {
                if let Some(parent) = file.parent().filter(|p| !p.as_os_str().is_empty()) {
                    std::fs::create_dir_all(parent)
                        .map_err(|err| format!("cannot create {}: {err}", parent.display()))?;
                }
                OpenOptions::new()
                    .append(true)
                    .create(true)
                    .mode(0o640)
                    .open(&file)
                    .map(|_| format!("{} is writable", file.display()))
                    .map_err(|err| format!("cannot open {}: {err}", file.display()))
            })
            .await
            .map_err(|err| format!("check failed: {err}"))?
        }))
    }
}

impl RegisteredSinkType for JsonlSinkConfig {
    const TYPE_NAME: &'static str = "jsonl";
}
