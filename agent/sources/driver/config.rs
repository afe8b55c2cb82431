//! `[sources.driver]`: the driver source's settings, their defaults and their checks.

use serde::Deserialize;

use crate::table_problems::TableProblems;

/// `[sources.driver]`: NVIDIA kernel-driver activity without kprobes.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DriverSourceConfig {
    /// ioctls on NVIDIA device files, from the syscall tracepoints.
    #[serde(default = "defaults::yes")]
    pub ioctl: bool,
    /// Character-device majors whose ioctls are kept; empty: every `nvidia*` major listed in
    /// /proc/devices (nvidia, nvidia-uvm, nvidia-caps, ...).
    #[serde(default)]
    pub device_majors: Vec<u32>,
    /// Driver functions timed with fentry/fexit (through the module's BTF), at most 8; `"a|b"`
    /// tries `a`, then `b` (names change between driver versions). Off by default: some run
    /// per interrupt.
    #[serde(default)]
    pub functions: Vec<String>,
}

impl DriverSourceConfig {
    /// Every problem with the values, keys relative to `[sources.driver]`.
    pub fn problems(&self) -> Vec<(String, String)> {
        let mut problems = TableProblems::default();
        if self.functions.len() > 8 {
            problems.add(
                "functions",
                format!("{} functions; at most 8 can be timed", self.functions.len()),
            );
        }
        if self
            .functions
            .iter()
            .any(|f| f.split('|').any(|name| name.trim().is_empty()))
        {
            problems.add("functions", "an empty function name");
        }
        if self.device_majors.len() > 8 {
            problems.add("device_majors", "at most 8 majors");
        }
        for (i, major) in self.device_majors.iter().enumerate() {
            // Linux device majors have 12 bits.
            problems.range(&format!("device_majors[{i}]"), *major, 0..=4095);
        }
        problems.into_vec()
    }
}

impl Default for DriverSourceConfig {
    fn default() -> Self {
        toml::from_str("").expect("every field has a default")
    }
}

mod defaults {
    pub fn yes() -> bool {
        true
    }
}
