//! What a tick of the schedule takes (each process's trap counts) and gives (the links to
//! attach, drop or switch), and where the hot links are.

/// Where the hot functions' links are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// One link per library: every process, every call.
    SystemWide,
    /// Pid-filtered links, attached and detached per process.
    PerProcess,
}

/// A process's cumulative traps, as the kernel's `process_traps` table holds them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reading {
    /// Process (thread group) id.
    pub pid: u32,
    /// Traps of hot functions.
    pub hot: u64,
    /// Traps of every other probed function.
    pub steady: u64,
}

/// What the caller carries out, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Attach per-process links for these processes, switch the kernel to per-process links,
    /// then drop the system-wide ones.
    SwitchToPerProcess(Vec<u32>),
    /// Attach the system-wide links, switch the kernel to them, drop every per-process link.
    SwitchToSystemWide,
    /// Attach this process's links.
    Attach(u32),
    /// Drop this process's links.
    Detach(u32),
    /// The process exited: forget its counters.
    Forget(u32),
}
