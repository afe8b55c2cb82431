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
}
