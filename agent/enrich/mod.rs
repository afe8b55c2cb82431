//! What the agent adds to raw events: which host and boot they come from, wall-clock time, and
//! which GPU a PCI bus id names. Read once at start; nothing here runs per event except
//! arithmetic and a map lookup.

mod clock;
mod gpus;
mod host;

pub use clock::Clocks;
pub use gpus::{driver_version, GpuDirectory};
pub use host::{host_identity, kernel_release, machine_id};
