//! The Parquet sink's registration: validation, build and the start-up health check (a local
//! root is writable, or can be created; an `s3://` root can be listed).

use object_store::path::Path as ObjectPath;
use object_store::ObjectStore;

use super::{ParquetSink, ParquetSinkConfig};
use crate::sink::Sink;
use crate::sink_type::{
    owned_problems, within_timeout, writable, BuildContext, HealthCheck, RegisteredSinkType,
    SinkType,
};

impl SinkType for ParquetSinkConfig {
    fn problems(&self) -> Vec<(String, String)> {
        owned_problems(ParquetSinkConfig::problems(self))
    }

    fn build(&self, context: &BuildContext<'_>) -> Box<dyn Sink> {
        Box::new(ParquetSink::new(
            context.name,
            self.clone(),
            &*context.identity.host,
        ))
    }

    fn health_check(&self) -> HealthCheck {
        let config = self.clone();
        Box::pin(within_timeout(async move {
            match config.s3_url() {
                None => Ok(writable(&config.path)?),
                Some(Err(reason)) => Err(reason),
                Some(Ok(url)) => {
                    let store = config
                        .object_store
                        .clone()
                        .unwrap_or_default()
                        .build(&url)
                        .map_err(|err| err.to_string())?;
                    let prefix = (!url.prefix.is_empty()).then(|| ObjectPath::from(&*url.prefix));
                    store
                        .list_with_delimiter(prefix.as_ref())
                        .await
                        .map(|_| format!("{url} can be listed"))
                        .map_err(|err| format!("cannot list {url}: {err}"))
                }
            }
        }))
    }
}

impl RegisteredSinkType for ParquetSinkConfig {
    const TYPE_NAME: &'static str = "parquet";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_local_root_is_writable_or_says_why() {
        let dir = tempfile::tempdir().unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let good = ParquetSinkConfig::with_path(dir.path().join("lake"));
        assert!(runtime.block_on(good.health_check()).is_ok());
        assert!(!dir.path().join("lake").exists(), "a check creates nothing");
        std::fs::write(dir.path().join("file"), b"").unwrap();
        let bad = ParquetSinkConfig::with_path(dir.path().join("file/lake"));
        let err = runtime.block_on(bad.health_check()).unwrap_err();
        assert!(err.contains("is not a directory"), "{err}");
    }
}
