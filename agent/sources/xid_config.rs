//! `[sources.xid]`: the settings of the two XID sources (the driver's tracepoint,
//! `xid_tracepoint/`, and the kernel log, `kmsg/`) and of how their reports are reconciled,
//! their defaults and their checks.

use std::path::PathBuf;

use serde::Deserialize;

use super::cuda::history::MAX_SUSPECTS;
use crate::table_problems::TableProblems;

/// Where in the kernel log reading starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum KmsgStart {
    /// Only lines logged after the agent starts (default: a restart does not repeat rows).
    #[default]
    End,
    /// Everything still in the kernel's log buffer.
    Beginning,
}

/// `[sources.xid]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct XidSourceConfig {
    /// Capture XIDs from the driver's tracepoint.
    #[serde(default = "defaults::yes")]
    pub tracepoint: bool,
    /// `category:name` of the tracepoint.
    #[serde(default = "defaults::xid_tracepoint")]
    pub tracepoint_name: String,
    /// Names of the record fields holding the bus id, the XID code and the message.
    #[serde(default)]
    pub tracepoint_fields: TracepointFields,
    /// Capture XIDs from `NVRM: Xid` lines in the kernel log.
    #[serde(default = "defaults::yes")]
    pub kmsg: bool,
    /// The kernel log device.
    #[serde(default = "defaults::kmsg_path")]
    pub kmsg_path: PathBuf,
    /// Where reading the kernel log starts.
    #[serde(default)]
    pub kmsg_start: KmsgStart,
    /// How long a report from one source waits for the same XID from the other.
    #[serde(default = "defaults::reconcile_window_ms")]
    pub reconcile_window_ms: u64,
    /// XIDs on one GPU closer than this belong to one incident.
    #[serde(default = "defaults::incident_window_secs")]
    pub incident_window_secs: u64,
    /// CUDA activity this recent attributes an XID to a process; failed calls this long after
    /// an XID are linked to its incident.
    #[serde(default = "defaults::attribution_window_secs")]
    pub attribution_window_secs: u64,
    /// How many of the attributed process's last kernel launches an XID that points at a
    /// running kernel (31, 13, 43, ...) lists as suspects; 0 lists none.
    #[serde(default = "defaults::xid_suspects")]
    pub suspects: usize,
}

/// Field names of the XID tracepoint record (the driver's names by default).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TracepointFields {
    /// `__data_loc char[]` holding the PCI bus id.
    #[serde(default = "defaults::field_dev")]
    pub dev: String,
    /// `u32` XID code.
    #[serde(default = "defaults::field_error_code")]
    pub error_code: String,
    /// `__data_loc char[]` message.
    #[serde(default = "defaults::field_msg")]
    pub msg: String,
}

impl XidSourceConfig {
    /// Every problem with the values, keys relative to `[sources.xid]`.
    pub fn problems(&self) -> Vec<(String, String)> {
        let mut problems = TableProblems::default();
        let valid_name =
            |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        match self.tracepoint_name.split_once(':') {
            Some((category, name)) if valid_name(category) && valid_name(name) => {}
            _ => problems.add(
                "tracepoint_name",
                format!("{:?} is not `category:name`", self.tracepoint_name),
            ),
        }
        for (key, value) in [
            ("dev", &self.tracepoint_fields.dev),
            ("error_code", &self.tracepoint_fields.error_code),
            ("msg", &self.tracepoint_fields.msg),
        ] {
            if !valid_name(value) {
                problems.add(
                    &format!("tracepoint_fields.{key}"),
                    format!("{value:?} is not a field name"),
                );
            }
        }
        problems.range("reconcile_window_ms", self.reconcile_window_ms, 0..=60_000);
        problems.range(
            "incident_window_secs",
            self.incident_window_secs,
            0..=86_400,
        );
        problems.range(
            "attribution_window_secs",
            self.attribution_window_secs,
            0..=3_600,
        );
        problems.range("suspects", self.suspects as u64, 0..=MAX_SUSPECTS as u64);
        problems.into_vec()
    }
}

impl Default for XidSourceConfig {
    fn default() -> Self {
        toml::from_str("").expect("every field has a default")
    }
}

impl Default for TracepointFields {
    fn default() -> Self {
        toml::from_str("").expect("every field has a default")
    }
}

mod defaults {
    use std::path::PathBuf;

    pub fn attribution_window_secs() -> u64 {
        10
    }
    pub fn field_dev() -> String {
        "dev".into()
    }
    pub fn field_error_code() -> String {
        "error_code".into()
    }
    pub fn field_msg() -> String {
        "msg".into()
    }
    pub fn incident_window_secs() -> u64 {
        10
    }
    pub fn kmsg_path() -> PathBuf {
        "/dev/kmsg".into()
    }
    pub fn reconcile_window_ms() -> u64 {
        1000
    }
    pub fn xid_suspects() -> usize {
        8
    }
    pub fn xid_tracepoint() -> String {
        "nvidia:nvidia_dev_xid".into()
    }
    pub fn yes() -> bool {
        true
    }
}
