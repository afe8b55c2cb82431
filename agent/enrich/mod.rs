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
