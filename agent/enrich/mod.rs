//! What the agent adds to raw events: which host and boot they come from, wall-clock time,
//! which GPU a PCI bus id names, and which container and pod a process runs in. Read once at
//! start or cached; nothing here runs per event except arithmetic and a map lookup.

mod cgroup;
mod clock;
mod gpus;
mod host;
mod workloads;

pub use clock::{now_ns, Clocks};
pub use gpus::{driver_version, GpuDirectory};
pub use host::{host_identity, kernel_release, machine_id};
pub use workloads::{read_workload, PodNames, WorkloadResolver};

use std::path::PathBuf;

use serde::Deserialize;

/// `[enrich]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnrichConfig {
    /// Folder of per-GPU folders named by bus id, each with an `information` file.
    #[serde(default = "defaults::nvidia_proc_dir")]
    pub nvidia_proc_dir: PathBuf,
    /// Where the GPUs' device files (`nvidia<minor>`) are.
    #[serde(default = "defaults::dev_dir")]
    pub dev_dir: PathBuf,
    /// The proc filesystem (processes' open files and cgroups).
    #[serde(default = "defaults::proc_dir")]
    pub proc_dir: PathBuf,
    /// The kubelet's pod log folders (`<namespace>_<name>_<uid>`), which name the pods that
    /// processes' cgroups give the UID of.
    #[serde(default = "defaults::pod_log_dir")]
    pub pod_log_dir: PathBuf,
}

impl Default for EnrichConfig {
    fn default() -> Self {
        toml::from_str("").expect("every field has a default")
    }
}

mod defaults {
    use std::path::PathBuf;

    pub fn dev_dir() -> PathBuf {
        PathBuf::from("/dev")
    }
    pub fn nvidia_proc_dir() -> PathBuf {
        "/proc/driver/nvidia/gpus".into()
    }
    pub fn pod_log_dir() -> PathBuf {
        PathBuf::from("/var/log/pods")
    }
    pub fn proc_dir() -> PathBuf {
        PathBuf::from("/proc")
    }
}
