//! Which tests may run beside which: every file of `tests/` runs in one process, so a test that
//! needs the machine or the kernel log to itself says so here instead of relying on cargo
//! running one file's binary at a time (as it did when each file was its own test binary).
//!
//! - [`exclusive`]: the test runs alone among the tests that take either guard. For load and
//!   timing tests that assert zero loss (`outage_load`, the `preemption` CPU hogs, the
//!   `cuda_threads` load), and for tests that count every XID their agent read from the kernel
//!   log (any other test's XID line would be counted too).
//! - [`shared`]: any number at once, never beside an exclusive one. For tests that start an
//!   agent, load BPF programs or write `/dev/kmsg` (with a bus id no other test uses).
//!
//! Tests that only run `gpuship validate`, read files or render views take neither.
//! The guard of a test that panicked is not poisoned for the others: its failure is its own.

use std::sync::{PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

static MACHINE: RwLock<()> = RwLock::new(());

/// Waits until no other guarded test runs, then holds the machine until dropped.
pub fn exclusive() -> RwLockWriteGuard<'static, ()> {
    MACHINE.write().unwrap_or_else(PoisonError::into_inner)
}

/// Waits until no exclusive test runs; holds off exclusive tests until dropped.
pub fn shared() -> RwLockReadGuard<'static, ()> {
    MACHINE.read().unwrap_or_else(PoisonError::into_inner)
}
