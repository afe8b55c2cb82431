//! `[sources]`: what the agent captures. Each source owns its settings (their defaults and
//! checks live in its folder); this table composes them.

use serde::Deserialize;

pub use super::cuda::config::CudaSourceConfig;
pub use super::driver::config::DriverSourceConfig;
pub use super::xid_config::{KmsgStart, TracepointFields, XidSourceConfig};

/// `[sources]`.
#[derive(Debug, Clone, PartialEq, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct SourcesConfig {
    /// `[sources.xid]`.
    #[serde(default)]
    pub xid: XidSourceConfig,
    /// `[sources.cuda]`.
    #[serde(default)]
    pub cuda: CudaSourceConfig,
    /// `[sources.driver]`.
    #[serde(default)]
    pub driver: DriverSourceConfig,
}

impl SourcesConfig {
    /// Every problem with the sources' values: `(table, key, message)`.
    pub fn problems(&self) -> Vec<(&'static str, String, String)> {
        let tables = [
            ("sources.xid", self.xid.problems()),
            ("sources.driver", self.driver.problems()),
            ("sources.cuda", self.cuda.problems()),
        ];
        tables
            .into_iter()
            .flat_map(|(table, problems)| {
                problems
                    .into_iter()
                    .map(move |(key, message)| (table, key, message))
            })
            .collect()
    }

    /// What this host lacks of what the sources' tables name explicitly: `(table, key,
    /// message)`.
    pub fn host_problems(&self) -> Vec<(&'static str, String, String)> {
        self.cuda
            .host_problems()
            .into_iter()
            .map(|(key, message)| ("sources.cuda", key, message))
            .collect()
    }

    /// Whether an enabled source finds its tracepoint through tracefs (the XID tracepoint's
    /// format is read there); `gpuship doctor` requires tracefs only then.
    pub fn needs_tracefs(&self) -> bool {
        self.xid.tracepoint
    }

    /// The enabled sources that load BPF programs, each as the setting that turns it off (for
    /// the privilege check's message); empty when none does.
    pub fn bpf_sources_on(&self) -> Vec<&'static str> {
        let sources = [
            (self.xid.tracepoint, "[sources.xid] tracepoint = false"),
            (self.cuda.enabled, "[sources.cuda] enabled = false"),
            (
                self.driver.ioctl || !self.driver.functions.is_empty(),
                "[sources.driver] ioctl = false with functions = []",
            ),
        ];
        sources
            .into_iter()
            .filter(|(on, _)| *on)
            .map(|(_, off)| off)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_bpf_source_that_is_on_is_named_by_the_setting_that_turns_it_off() {
        let all: SourcesConfig = toml::from_str("").unwrap();
        assert_eq!(
            all.bpf_sources_on(),
            [
                "[sources.xid] tracepoint = false",
                "[sources.cuda] enabled = false",
                "[sources.driver] ioctl = false with functions = []",
            ]
        );
        let driver_only: SourcesConfig = toml::from_str(
            "[xid]\ntracepoint = false\n[cuda]\nenabled = false\n[driver]\nioctl = false\nfunctions = [\"os_alloc_mem\"]\n",
        )
        .unwrap();
        assert_eq!(
            driver_only.bpf_sources_on(),
            ["[sources.driver] ioctl = false with functions = []"]
        );
        let none: SourcesConfig = toml::from_str(
            "[xid]\ntracepoint = false\n[cuda]\nenabled = false\n[driver]\nioctl = false\n",
        )
        .unwrap();
        assert!(none.bpf_sources_on().is_empty());
    }
}
