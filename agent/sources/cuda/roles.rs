//! What each CUDA function does to the state the agent keeps beside its rows: the kernel-name
//! table and launch history (`kernels`, `history`), each thread's context and GPU (`devices`)
//! and each process's memory (`memory`). One match per concern, on the base symbol (its
//! per-thread default-stream variants do the same).

/// `cuMemcpyAsync_ptsz` and `cuMemcpyAsync_ptds` are `cuMemcpyAsync`.
fn base_symbol(symbol: &str) -> &str {
    ["_ptsz", "_ptds"]
        .iter()
        .find_map(|suffix| symbol.strip_suffix(suffix))
        .unwrap_or(symbol)
}

/// What a function does to the table of kernel names (`kernels::KernelNames`) and to the
/// launch history an XID's suspects come from (`history`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KernelRole {
    /// Nothing.
    #[default]
    None,
    /// Launches the kernel handle it takes: its row is named from the table.
    Launch,
    /// Makes a kernel handle from a name (`cuLibraryGetKernel`, `cuModuleGetFunction`).
    Names,
    /// Makes a `CUfunction` of a `CUkernel` (`cuKernelGetFunction`).
    FunctionOfKernel,
    /// Unloads a library or module and the kernels made from it.
    Unloads,
    /// Waits for all work of the calling thread's context (`cuCtxSynchronize*`).
    SyncsContext,
    /// Waits for all work of the stream it takes (`cuStreamSynchronize*`).
    SyncsStream,
}

/// The role of an exported symbol (its per-thread-stream variants included).
pub fn kernel_role(symbol: &str) -> KernelRole {
    match base_symbol(symbol) {
        "cuLaunchKernel" | "cuLaunchKernelEx" => KernelRole::Launch,
        "cuLibraryGetKernel" | "cuModuleGetFunction" => KernelRole::Names,
        "cuKernelGetFunction" => KernelRole::FunctionOfKernel,
        "cuLibraryUnload" | "cuModuleUnload" => KernelRole::Unloads,
        "cuCtxSynchronize" | "cuCtxSynchronize_v2" => KernelRole::SyncsContext,
        "cuStreamSynchronize" => KernelRole::SyncsStream,
        _ => KernelRole::None,
    }
}

/// What a function tells about devices and contexts (`devices::CallDevices`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeviceRole {
    /// Nothing.
    #[default]
    None,
    /// Returns the UUID of the device ordinal in its `handle` (`cuDeviceGetUuid*`).
    NamesDevice,
    /// Makes the context in its `handle` on the device ordinal in `parent_handle`
    /// (`cuDevicePrimaryCtxRetain`, `cuCtxCreate*`); it becomes current for `cuCtxCreate*`.
    MakesContext {
        /// The new context is pushed on the calling thread (`cuCtxCreate*` does this).
        becomes_current: bool,
    },
    /// Makes the context in its `handle` the calling thread's current one (`cuCtxSetCurrent`).
    SetsCurrent,
    /// Pushes the context in its `handle` on the calling thread (`cuCtxPushCurrent_v2`).
    PushesCurrent,
    /// Pops the calling thread's current context (`cuCtxPopCurrent_v2`).
    PopsCurrent,
    /// Destroys the context in its `handle` (`cuCtxDestroy_v2`).
    DestroysContext,
}

/// The device role of an exported symbol.
pub fn device_role(symbol: &str) -> DeviceRole {
    match base_symbol(symbol) {
        "cuDeviceGetUuid" | "cuDeviceGetUuid_v2" => DeviceRole::NamesDevice,
        "cuDevicePrimaryCtxRetain" => DeviceRole::MakesContext {
            becomes_current: false,
        },
        "cuCtxCreate_v2" | "cuCtxCreate_v3" | "cuCtxCreate_v4" => DeviceRole::MakesContext {
            becomes_current: true,
        },
        "cuCtxSetCurrent" => DeviceRole::SetsCurrent,
        "cuCtxPushCurrent_v2" => DeviceRole::PushesCurrent,
        "cuCtxPopCurrent_v2" => DeviceRole::PopsCurrent,
        "cuCtxDestroy_v2" => DeviceRole::DestroysContext,
        _ => DeviceRole::None,
    }
}

/// What a function changes about the answers of kernel lookups (`cuKernelGetFunction`, whose
/// CUfunction depends on the kernel and the calling thread's current context), for the BPF
/// memo of repeated lookups (`bpf/include/cuda_lookup_memo.h`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AnswerChange {
    /// Nothing.
    #[default]
    None,
    /// The calling thread's current context (set, push, pop, create, attach).
    ThisThread,
    /// Any thread's answers: a context destroyed or detached, a primary context released or
    /// reset, a library or module unloaded (its kernel handles may be reused).
    AllThreads,
}

/// The answer change of an exported symbol, whatever its API version (`cuCtxCreate`,
/// `cuCtxCreate_v4`) and default-stream variant.
pub fn answer_change(symbol: &str) -> AnswerChange {
    let base = base_symbol(symbol);
    let unversioned = match base.rsplit_once("_v") {
        Some((stem, version))
            if !version.is_empty() && version.bytes().all(|b| b.is_ascii_digit()) =>
        {
            stem
        }
        _ => base,
    };
    match unversioned {
        "cuCtxSetCurrent" | "cuCtxPushCurrent" | "cuCtxPopCurrent" | "cuCtxCreate"
        | "cuCtxAttach" => AnswerChange::ThisThread,
        "cuCtxDestroy"
        | "cuCtxDetach"
        | "cuDevicePrimaryCtxRelease"
        | "cuDevicePrimaryCtxReset"
        | "cuGreenCtxDestroy"
        | "cuLibraryUnload"
        | "cuModuleUnload" => AnswerChange::AllThreads,
        _ => AnswerChange::None,
    }
}

/// Which kind of memory an allocation holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MemoryKind {
    /// `cuMemAlloc_v2`, `cuMemAllocPitch_v2`.
    Device,
    /// `cuMemAllocManaged`.
    Managed,
    /// Page-locked host memory: `cuMemHostAlloc`, `cuMemAllocHost_v2`.
    HostPinned,
    /// Stream-ordered allocations out of a pool: `cuMemAllocAsync`, `cuMemAllocFromPoolAsync`.
    Pool,
    /// Physical memory of the virtual-memory API: `cuMemCreate` handles.
    Physical,
}

impl MemoryKind {
    /// Every kind, in column order.
    pub const ALL: [MemoryKind; 5] = [
        MemoryKind::Device,
        MemoryKind::Managed,
        MemoryKind::HostPinned,
        MemoryKind::Pool,
        MemoryKind::Physical,
    ];

    /// The name in rows and metric labels.
    pub fn name(self) -> &'static str {
        match self {
            MemoryKind::Device => "device",
            MemoryKind::Managed => "managed",
            MemoryKind::HostPinned => "host_pinned",
            MemoryKind::Pool => "pool",
            MemoryKind::Physical => "physical",
        }
    }
}

/// What a function does to a process's memory (`memory::MemoryLedger`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MemoryRole {
    /// Nothing.
    #[default]
    None,
    /// `cuInit`: memory is seen from the process's start.
    Initializes,
    /// Allocates `bytes` at the pointer in `device_ptr`.
    Allocates(MemoryKind),
    /// Frees the allocation at `device_ptr` (`cuMemFree_v2`, `cuMemFreeAsync`, `cuMemFreeHost`).
    Frees,
    /// Creates `bytes` of physical memory, its handle in `device_ptr` (`cuMemCreate`).
    CreatesPhysical,
    /// Releases the handle in `device_ptr` (`cuMemRelease`): its memory is freed once unmapped.
    ReleasesPhysical,
    /// Maps `bytes` of the handle in `handle` at `device_ptr` (`cuMemMap`).
    Maps,
    /// Unmaps `bytes` at `device_ptr` (`cuMemUnmap`).
    Unmaps,
}

/// The memory role of an exported symbol.
pub fn memory_role(symbol: &str) -> MemoryRole {
    use MemoryKind::*;
    match base_symbol(symbol) {
        "cuInit" => MemoryRole::Initializes,
        "cuMemAlloc_v2" | "cuMemAllocPitch_v2" => MemoryRole::Allocates(Device),
        "cuMemAllocManaged" => MemoryRole::Allocates(Managed),
        "cuMemHostAlloc" | "cuMemAllocHost_v2" => MemoryRole::Allocates(HostPinned),
        "cuMemAllocAsync" | "cuMemAllocFromPoolAsync" => MemoryRole::Allocates(Pool),
        "cuMemFree_v2" | "cuMemFreeAsync" | "cuMemFreeHost" => MemoryRole::Frees,
        "cuMemCreate" => MemoryRole::CreatesPhysical,
        "cuMemRelease" => MemoryRole::ReleasesPhysical,
        "cuMemMap" => MemoryRole::Maps,
        "cuMemUnmap" => MemoryRole::Unmaps,
        _ => MemoryRole::None,
    }
}

/// Every role of one function.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Roles {
    pub kernel: KernelRole,
    pub device: DeviceRole,
    pub memory: MemoryRole,
}

/// The roles of each probed function, by function id.
#[derive(Debug, Clone, Default)]
pub struct RoleTable(Vec<Roles>);

impl RoleTable {
    /// The roles of `functions`' names.
    pub fn new(functions: &crate::sources::functions::FunctionTable) -> Self {
        Self(
            (0..functions.len() as u32)
                .map(|id| {
                    functions.name(id).map_or(Roles::default(), |name| Roles {
                        kernel: kernel_role(name),
                        device: device_role(name),
                        memory: memory_role(name),
                    })
                })
                .collect(),
        )
    }

    /// The roles of function `id` (none for an unknown id).
    #[inline]
    pub fn get(&self, id: u32) -> Roles {
        self.0.get(id as usize).copied().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_roles_follow_the_base_symbol() {
        assert_eq!(kernel_role("cuLaunchKernel_ptsz"), KernelRole::Launch);
        assert_eq!(kernel_role("cuLaunchKernelEx_ptsz"), KernelRole::Launch);
        assert_eq!(kernel_role("cuLaunchCooperativeKernel"), KernelRole::None);
        assert_eq!(kernel_role("cuModuleGetFunction"), KernelRole::Names);
        assert_eq!(
            kernel_role("cuKernelGetFunction"),
            KernelRole::FunctionOfKernel
        );
        assert_eq!(kernel_role("cuLibraryUnload"), KernelRole::Unloads);
        assert_eq!(kernel_role("cuLibraryLoadData"), KernelRole::None);
        assert_eq!(kernel_role("cuCtxSynchronize_v2"), KernelRole::SyncsContext);
        assert_eq!(
            kernel_role("cuStreamSynchronize_ptsz"),
            KernelRole::SyncsStream
        );
        assert_eq!(kernel_role("cuEventSynchronize"), KernelRole::None);
    }

    #[test]
    fn answer_changes_follow_the_unversioned_symbol() {
        for symbol in [
            "cuCtxSetCurrent",
            "cuCtxPushCurrent",
            "cuCtxPushCurrent_v2",
            "cuCtxPopCurrent_v2",
            "cuCtxCreate",
            "cuCtxCreate_v4",
            "cuCtxAttach",
        ] {
            assert_eq!(answer_change(symbol), AnswerChange::ThisThread, "{symbol}");
        }
        for symbol in [
            "cuCtxDestroy",
            "cuCtxDestroy_v2",
            "cuCtxDetach",
            "cuDevicePrimaryCtxRelease_v2",
            "cuDevicePrimaryCtxReset",
            "cuGreenCtxDestroy",
            "cuLibraryUnload",
            "cuModuleUnload",
        ] {
            assert_eq!(answer_change(symbol), AnswerChange::AllThreads, "{symbol}");
        }
        for symbol in [
            "cuCtxGetCurrent",
            "cuCtxSynchronize_v2",
            "cuDevicePrimaryCtxRetain",
            "cuCtxCreate_v",
            "cuCtxCreate_vx",
            "cuKernelGetFunction",
            "",
        ] {
            assert_eq!(answer_change(symbol), AnswerChange::None, "{symbol}");
        }
    }

    #[test]
    fn device_and_memory_roles_follow_the_base_symbol() {
        assert_eq!(device_role("cuDeviceGetUuid_v2"), DeviceRole::NamesDevice);
        assert_eq!(
            device_role("cuCtxCreate_v4"),
            DeviceRole::MakesContext {
                becomes_current: true
            }
        );
        assert_eq!(
            device_role("cuDevicePrimaryCtxRetain"),
            DeviceRole::MakesContext {
                becomes_current: false
            }
        );
        assert_eq!(device_role("cuCtxPopCurrent_v2"), DeviceRole::PopsCurrent);
        assert_eq!(device_role("cuCtxPopCurrent"), DeviceRole::None);
        assert_eq!(device_role("cuCtxGetDevice_v2"), DeviceRole::None);
        assert_eq!(
            memory_role("cuMemAllocAsync_ptsz"),
            MemoryRole::Allocates(MemoryKind::Pool)
        );
        assert_eq!(memory_role("cuMemFreeAsync_ptsz"), MemoryRole::Frees);
        assert_eq!(memory_role("cuMemFreeHost"), MemoryRole::Frees);
        assert_eq!(memory_role("cuMemAddressReserve"), MemoryRole::None);
        assert_eq!(memory_role("cuMemAlloc"), MemoryRole::None);
        let names: Vec<_> = MemoryKind::ALL.iter().map(|k| k.name()).collect();
        assert_eq!(
            names,
            ["device", "managed", "host_pinned", "pool", "physical"]
        );
    }
}
