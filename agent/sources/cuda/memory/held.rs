//! What one process holds on one GPU ([`Held`]), and the short per-GPU list a process keeps.

use std::sync::Arc;

use gpuship_sinks::schema::CallGpu;

use super::GpuKey;
use crate::sources::cuda::roles::MemoryKind;

/// GPUs one process's memory is followed on; an allocation on a further GPU is not followed
/// (counted as untracked, the process's rows say incomplete). A node has at most a few dozen.
pub(super) const MAX_GPUS_PER_PROCESS: usize = 64;

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

    /// Takes one allocation of `kind` away; with none left nothing is held (sums that
    /// saturated leave no remainder).
    pub(super) fn remove(&mut self, kind: MemoryKind, bytes: u64) {
        self.bytes[kind as usize] = self.bytes[kind as usize].saturating_sub(bytes);
        self.allocations = self.allocations.saturating_sub(1);
        if self.allocations == 0 {
            self.bytes = [0; 5];
        }
    }

    /// Bytes of `kind`.
    pub fn of(&self, kind: MemoryKind) -> u64 {
        self.bytes[kind as usize]
    }
}

/// A GPU's place in its process's [`HeldByGpu`]. Places are kept while the process lives, so
/// an allocation names its GPU by place: no reference count is touched per allocation or free.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct GpuSlot(u8);

/// What a process holds per GPU, in the order its GPUs were first seen. A process uses a
/// handful of GPUs, so a list found by pointer first (rows of one GPU share its `Arc`) costs
/// less per row than hashing the GPU's strings.
#[derive(Debug, Default)]
pub(super) struct HeldByGpu(pub(super) Vec<(GpuKey, Held)>);

impl HeldByGpu {
    /// The place of `gpu`, added with nothing held when it had none; `None` when the process
    /// already has [`MAX_GPUS_PER_PROCESS`] others.
    pub(super) fn slot(&mut self, gpu: Option<&Arc<CallGpu>>) -> Option<GpuSlot> {
        let found = self.0.iter().position(|(key, _)| match (key, gpu) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b) || **a == **b,
            (None, None) => true,
            _ => false,
        });
        let index = match found {
            Some(index) => index,
            None if self.0.len() < MAX_GPUS_PER_PROCESS => {
                self.0.push((gpu.cloned(), Held::default()));
                self.0.len() - 1
            }
            None => return None,
        };
        Some(GpuSlot(index as u8))
    }

    /// The figures at `slot`.
    pub(super) fn at(&mut self, slot: GpuSlot) -> &mut Held {
        &mut self.0[usize::from(slot.0)].1
    }

    /// The GPU at `slot`.
    pub(super) fn gpu(&self, slot: GpuSlot) -> Option<&Arc<CallGpu>> {
        self.0[usize::from(slot.0)].0.as_ref()
    }
}

const _: () = assert!(MAX_GPUS_PER_PROCESS <= u8::MAX as usize + 1);
