//! Builds running sinks from their config: the one place a new sink type is registered.

use gpuship_sinks::blackhole::BlackholeSink;
use gpuship_sinks::jsonl::JsonlSink;
use gpuship_sinks::kafka::KafkaSink;
use gpuship_sinks::otlp::OtlpSink;
use gpuship_sinks::parquet::ParquetSink;
use gpuship_sinks::schema::HostIdentity;
use gpuship_sinks::Sink;

use crate::config::{SinkConfig, SinkEntry};

/// Unique names: the type, suffixed with the position when a type appears more than once.
pub fn sink_names(entries: &[SinkEntry]) -> Vec<String> {
    let configs: Vec<&SinkConfig> = entries.iter().map(|e| &e.sink).collect();
    entries
        .iter()
        .enumerate()
        .map(|(index, entry)| {
            if let Some(name) = &entry.options.name {
                return name.clone();
            }
            let config = &entry.sink;
            let same_type = configs
                .iter()
                .filter(|c| c.type_name() == config.type_name())
                .count();
            if same_type > 1 {
                format!("{}-{index}", config.type_name())
            } else {
                config.type_name().to_string()
            }
        })
        .collect()
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use gpuship_sinks::parquet::ParquetSinkConfig;

    #[test]
    fn names_are_unique() {
        let mut configs = vec![
            SinkEntry::new(SinkConfig::Parquet(ParquetSinkConfig::with_path("/a"))),
            SinkEntry::new(SinkConfig::Parquet(ParquetSinkConfig::with_path("/b"))),
        ];
        assert_eq!(sink_names(&configs), vec!["parquet-0", "parquet-1"]);
        assert_eq!(sink_names(&configs[..1]), vec!["parquet"]);
        configs[1].options.name = Some("lake".into());
        assert_eq!(sink_names(&configs), vec!["parquet-0", "lake"]);
    }
}
