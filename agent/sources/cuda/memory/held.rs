//! What one process holds on one GPU ([`Held`]), and the short per-GPU list a process keeps.

use std::sync::Arc;

use super::GpuKey;
use crate::sources::cuda::roles::MemoryKind;

/// Bytes held per kind (`MemoryKind::ALL` order) and outstanding allocations.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Held {
    pub bytes: [u64; 5],
    pub allocations: u64,
}

impl Held {
    pub(super) fn add(&mut self, kind: MemoryKind, bytes: u64) {
        self.bytes[kind as usize] = self.bytes[kind as usize].saturating_add(bytes);
        self.allocations += 1;
    }

    pub(super) fn remove(&mut self, kind: MemoryKind, bytes: u64) {
        self.bytes[kind as usize] = self.bytes[kind as usize].saturating_sub(bytes);
        self.allocations = self.allocations.saturating_sub(1);
    }

    /// Bytes of `kind`.
    pub fn of(&self, kind: MemoryKind) -> u64 {
        self.bytes[kind as usize]
    }
}

/// What a process holds per GPU. A process uses a handful of GPUs, so a list found by pointer
/// first (rows of one GPU share its `Arc`) costs less per row than hashing the GPU's strings.
#[derive(Debug, Default)]
pub(super) struct HeldByGpu(pub(super) Vec<(GpuKey, Held)>);

impl HeldByGpu {
    pub(super) fn position(&self, gpu: &GpuKey) -> Option<usize> {
        self.0.iter().position(|(key, _)| match (key, gpu) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b) || a == b,
            (None, None) => true,
            _ => false,
        })
    }

    /// The figures of `gpu`, started at zero when it had none.
    pub(super) fn on(&mut self, gpu: &GpuKey) -> &mut Held {
        let index = self.position(gpu).unwrap_or_else(|| {
            self.0.push((gpu.clone(), Held::default()));
            self.0.len() - 1
        });
        &mut self.0[index].1
    }
}
