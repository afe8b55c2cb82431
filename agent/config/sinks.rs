//! `[[sinks]]` entries: the destination (selected by `type`) and the options every sink shares
//! (its name, which events it takes, and its queue).

use gpuship_sinks::blackhole::BlackholeSinkConfig;
use gpuship_sinks::jsonl::JsonlSinkConfig;
use gpuship_sinks::kafka::KafkaSinkConfig;
use gpuship_sinks::otlp::OtlpSinkConfig;
use gpuship_sinks::parquet::ParquetSinkConfig;
use gpuship_sinks::{
    BufferConfig, DefaultCudaRows, EventKind, RegisteredSinkType, SinkType, SpoolConfig,
};
use serde::Deserialize;
use toml::de::{DeTable, DeValue};
use toml::Spanned;

use super::parse::{typed, Problems};

/// One `[[sinks]]` table.
#[derive(Debug, Clone, PartialEq)]
pub struct SinkEntry {
    /// Options every sink has.
    pub options: SinkOptions,
    /// The destination.
    pub sink: SinkConfig,
}

/// Keys every sink accepts besides its own.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SinkOptions {
    /// Name in logs and metrics (default: the type, numbered when repeated).
    #[serde(default)]
    pub name: Option<String>,
    /// Event kinds this sink takes (default: all).
    #[serde(default = "all_kinds")]
    pub kinds: Vec<EventKind>,
    /// Which CUDA rows this sink takes (default: all).
    #[serde(default)]
    pub cuda_filter: Option<CudaFilter>,
    /// The sink's queue: `max_events`, `max_bytes`, `when_full`.
    #[serde(default)]
    pub buffer: BufferConfig,
    /// The sink's disk spool for outages and shutdown: `enabled`, `max_size`, `fsync`.
    #[serde(default)]
    pub spool: SpoolConfig,
}

/// Keys of [`SinkOptions`], split off a `[[sinks]]` table before its type-specific part.
pub const OPTION_KEYS: [&str; 5] = ["name", "kinds", "cuda_filter", "buffer", "spool"];

fn all_kinds() -> Vec<EventKind> {
    EventKind::all().collect()
}

impl Default for SinkOptions {
    fn default() -> Self {
        Self {
            name: None,
            kinds: all_kinds(),
            cuda_filter: None,
            buffer: BufferConfig::default(),
            spool: SpoolConfig::default(),
        }
    }
}

/// CUDA rows a sink keeps: those that failed, or took at least `slower_than_ns`, or both
/// (a row passes when it meets any condition set); `all = true` keeps every call (the way to
/// lift the OTLP sink's default of failed calls only). The flight recorder's rows around an
/// incident pass every filter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CudaFilter {
    /// Keep every call (the other conditions are then moot).
    #[serde(default)]
    pub all: bool,
    /// Keep calls whose CUresult is not CUDA_SUCCESS.
    #[serde(default)]
    pub failed: bool,
    /// Keep calls that took at least this long.
    #[serde(default)]
    pub slower_than_ns: Option<u64>,
}

impl CudaFilter {
    /// Whether a call passes.
    #[inline]
    pub fn keeps(&self, result: u32, duration_ns: u64) -> bool {
        self.all
            || (self.failed && result != 0)
            || self.slower_than_ns.is_some_and(|t| duration_ns >= t)
    }

    /// Failed calls only: the OTLP sink's default.
    pub const FAILED_ONLY: CudaFilter = CudaFilter {
        all: false,
        failed: true,
        slower_than_ns: None,
    };
}

/// Every sink type, one line each: `Variant(config type)`. The config type implements
/// [`RegisteredSinkType`] in its sink's folder (its `type` name, validation, default CUDA rows,
/// start-up check, build and health check); this list makes it a `[[sinks]]` `type`. Adding a
/// sink is its folder plus one line here.
macro_rules! sink_types {
    ($($(#[$doc:meta])* $variant:ident($config:ty),)+) => {
        /// The destination of one `[[sinks]]` entry; `type` selects it.
        #[derive(Debug, Clone, PartialEq)]
        pub enum SinkConfig {
            $($(#[$doc])* $variant($config),)+
        }

        /// The `type` values, in the order error messages list them.
        pub const SINK_TYPES: &[&str] = &[$(<$config as RegisteredSinkType>::TYPE_NAME,)+];

        impl SinkConfig {
            /// The `type` value.
            pub fn type_name(&self) -> &'static str {
                match self {
                    $(SinkConfig::$variant(_) => <$config as RegisteredSinkType>::TYPE_NAME,)+
                }
            }

            /// What the sink's type does for the agent (validate, build, check).
            pub fn sink_type(&self) -> &dyn SinkType {
                match self {
                    $(SinkConfig::$variant(config) => config,)+
                }
            }

            /// Reads the type-specific keys of a sink whose `type` is `type_name`; None when
            /// no sink has that type, Some(None) when the keys are wrong (problems recorded).
            fn parse_destination(
                type_name: &str,
                destination: Spanned<DeValue<'_>>,
                path: &str,
                problems: &mut Problems,
            ) -> Option<Option<SinkConfig>> {
                $(if type_name == <$config as RegisteredSinkType>::TYPE_NAME {
                    return Some(typed::<$config>(destination, path, problems).map(SinkConfig::$variant));
                })+
                None
            }
        }
    };
}

sink_types! {
    /// Parquet files.
    Parquet(ParquetSinkConfig),
    /// Kafka topics (boxed: the largest config by far).
    Kafka(Box<KafkaSinkConfig>),
    /// JSON lines on stdout or in rotated files.
    Jsonl(JsonlSinkConfig),
    /// OpenTelemetry log records to a collector.
    Otlp(OtlpSinkConfig),
    /// Discards batches (optionally after a delay): measurements and tests.
    Blackhole(BlackholeSinkConfig),
}

impl SinkConfig {
    /// The CUDA selection a sink of this type has when its entry sets none (OTLP, the costliest
    /// sink per event, takes failed calls only; the others take every call).
    pub fn default_cuda_filter(&self) -> Option<CudaFilter> {
        match self.sink_type().default_cuda_rows() {
            DefaultCudaRows::FailedOnly => Some(CudaFilter::FAILED_ONLY),
            DefaultCudaRows::All => None,
        }
    }
}

impl SinkEntry {
    /// Parses the `index`th `[[sinks]]` table: shared options, then the part its `type`
    /// selects, each deserialized on its own so that every wrong key is reported with its
    /// line. None (with the problems recorded) when the type or a required key is wrong.
    pub(super) fn parse(
        index: usize,
        value: Spanned<DeValue<'_>>,
        problems: &mut Problems,
    ) -> Option<SinkEntry> {
        let path = format!("sinks[{index}]");
        let span = value.span();
        let DeValue::Table(table) = value.into_inner() else {
            problems.at(&path, span.start, "must be a table: write it as [[sinks]]");
            return None;
        };
        let (mut options, mut destination, mut type_value) = (DeTable::new(), DeTable::new(), None);
        for (key, value) in table {
            match key.get_ref().as_ref() {
                "type" => type_value = Some(value),
                name if OPTION_KEYS.contains(&name) => {
                    options.insert(key, value);
                }
                _ => {
                    destination.insert(key, value);
                }
            }
        }
        let filter_set = options.contains_key("cuda_filter");
        let options = typed::<SinkOptions>(
            Spanned::new(span.clone(), DeValue::Table(options)),
            &path,
            problems,
        );
        let destination = Spanned::new(span.clone(), DeValue::Table(destination));
        let types = SINK_TYPES
            .iter()
            .map(|t| format!("`{t}`"))
            .collect::<Vec<_>>()
            .join(", ");
        let Some(type_value) = type_value else {
            problems.at(
                format!("{path}.type"),
                span.start,
                format!("missing; one of {types}"),
            );
            return None;
        };
        let type_offset = type_value.span().start;
        let type_name = type_value.get_ref().as_str();
        let parsed = type_name
            .and_then(|name| SinkConfig::parse_destination(name, destination, &path, problems));
        let Some(sink) = parsed else {
            let found =
                type_name.map_or("a value that is not a string".into(), |t| format!("`{t}`"));
            problems.at(
                format!("{path}.type"),
                type_offset,
                format!("unknown sink type {found}, expected one of {types}"),
            );
            return None;
        };
        let sink = sink?;
        let mut options = options?;
        // A sink type's default filter is for its CUDA rows: a sink that takes none has none
        // (an OTLP sink of `kinds = ["xid"]` is valid as written).
        if !filter_set && options.kinds.contains(&EventKind::Cuda) {
            options.cuda_filter = sink.default_cuda_filter();
        }
        if options.cuda_filter.is_some_and(|f| f.all) {
            options.cuda_filter = None;
        }
        Some(SinkEntry { options, sink })
    }

    /// A sink with default options.
    pub fn new(sink: SinkConfig) -> Self {
        let options = SinkOptions {
            cuda_filter: sink.default_cuda_filter(),
            ..SinkOptions::default()
        };
        Self { options, sink }
    }
}

/// Each sink's name: its `name`, else its type, suffixed with its position when the type
/// appears more than once (`parquet-0`, `parquet-1`). Validation makes them unique.
pub fn sink_names(entries: &[SinkEntry]) -> Vec<String> {
    entries
        .iter()
        .enumerate()
        .map(|(index, entry)| {
            if let Some(name) = &entry.options.name {
                return name.clone();
            }
            let type_name = entry.sink.type_name();
            let same_type = entries
                .iter()
                .filter(|e| e.sink.type_name() == type_name)
                .count();
            if same_type > 1 {
                format!("{type_name}-{index}")
            } else {
                type_name.to_string()
            }
        })
        .collect()
}

/// Why `name` cannot name a sink. Names become folder names (the spool under `state_dir`) and
/// metric label values, so they are short and plain: `[A-Za-z0-9_.-]{1,64}`, not `.` or `..`.
pub fn sink_name_problem(name: &str) -> Option<String> {
    let plain = name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
    if name.is_empty() || name.len() > 64 || !plain || name == "." || name == ".." {
        Some(format!(
            "{:?} is not a sink name: use 1 to 64 of A-Z a-z 0-9 _ . - (not \".\" or \"..\")",
            name
        ))
    } else {
        None
    }
}

#[cfg(test)]
mod tests;
