//! The CUDA driver API functions gpuship knows, and where each keeps the arguments worth
//! recording. The BPF side is generic: this table becomes each probe's attach cookie.

use crate::bpf::cuda::types::{gpuship_cookie_layout, gpuship_launch_layout};

/// Where a function's interesting arguments are (0-based integer-argument positions).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ArgSpec {
    /// Argument holding a byte count.
    pub bytes: Option<u8>,
    /// Argument holding a device pointer.
    pub device_ptr: Option<u8>,
    /// Argument pointing at the device pointer an allocation writes (read at return).
    pub out_device_ptr: Option<u8>,
    /// Argument holding the stream.
    pub stream: Option<u8>,
    /// Kernel-launch argument layout.
    pub launch: Launch,
    /// Argument holding the CUDA object the call uses (a launch's CUfunction or CUkernel, the
    /// library or module an unload drops).
    pub handle: Option<u8>,
    /// Argument holding the object a getter takes its result from (a library, module or
    /// kernel).
    pub parent: Option<u8>,
    /// Argument holding a kernel's name (read at return).
    pub name: Option<u8>,
    /// What `out_device_ptr` points at.
    pub out: OutValue,
}

/// What a call writes through its out pointer (`ArgSpec::out_device_ptr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OutValue {
    /// A device pointer (or a physical allocation's handle): the row's `device_ptr`.
    #[default]
    DevicePointer,
    /// The handle the call makes (a getter's, a load's, a context's): the row's `handle`.
    Handle,
    /// A device's 16-byte `CUuuid` (`cuDeviceGetUuid`): the row's GPU.
    Uuid,
}

/// How a launch passes its geometry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Launch {
    /// Not a launch.
    #[default]
    None,
    /// `cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shmem, stream, ...)`.
    Kernel,
    /// `cuLaunchKernelEx(const CUlaunchConfig *, ...)`.
    KernelEx,
}

impl ArgSpec {
    /// Name, duration and result only.
    pub const GENERIC: ArgSpec = ArgSpec {
        bytes: None,
        device_ptr: None,
        out_device_ptr: None,
        stream: None,
        launch: Launch::None,
        handle: None,
        parent: None,
        name: None,
        out: OutValue::DevicePointer,
    };

    /// The attach cookie for this spec and function id (layout in gpuship_events.h).
    pub fn cookie(&self, function_id: u32) -> u64 {
        debug_assert!(function_id <= gpuship_cookie_layout::GPUSHIP_COOKIE_FUNCTION_MASK.0);
        let none = gpuship_cookie_layout::GPUSHIP_COOKIE_NONE.0 as u64;
        let field = |arg: Option<u8>, shift: gpuship_cookie_layout| {
            (arg.map_or(none, |a| a as u64 & none)) << shift.0
        };
        let launch = match self.launch {
            Launch::None => gpuship_launch_layout::GPUSHIP_LAUNCH_NONE.0,
            Launch::Kernel => gpuship_launch_layout::GPUSHIP_LAUNCH_KERNEL.0,
            Launch::KernelEx => gpuship_launch_layout::GPUSHIP_LAUNCH_KERNEL_EX.0,
        } as u64;
        function_id as u64
            | field(
                self.bytes,
                gpuship_cookie_layout::GPUSHIP_COOKIE_BYTES_SHIFT,
            )
            | field(
                self.device_ptr,
                gpuship_cookie_layout::GPUSHIP_COOKIE_DEVICE_PTR_SHIFT,
            )
            | field(
                self.out_device_ptr,
                gpuship_cookie_layout::GPUSHIP_COOKIE_OUT_PTR_SHIFT,
            )
            | field(
                self.stream,
                gpuship_cookie_layout::GPUSHIP_COOKIE_STREAM_SHIFT,
            )
            | launch << gpuship_cookie_layout::GPUSHIP_COOKIE_LAUNCH_SHIFT.0
            | field(self.name, gpuship_cookie_layout::GPUSHIP_COOKIE_NAME_SHIFT)
            | field(
                self.handle,
                gpuship_cookie_layout::GPUSHIP_COOKIE_HANDLE_SHIFT,
            )
            | field(
                self.parent,
                gpuship_cookie_layout::GPUSHIP_COOKIE_PARENT_SHIFT,
            )
            | u64::from(self.out == OutValue::Handle)
                << gpuship_cookie_layout::GPUSHIP_COOKIE_OUT_IS_HANDLE_SHIFT.0
            | u64::from(self.out == OutValue::Uuid)
                << gpuship_cookie_layout::GPUSHIP_COOKIE_OUT_IS_UUID_SHIFT.0
    }
}

const fn spec(
    bytes: Option<u8>,
    device_ptr: Option<u8>,
    out: Option<u8>,
    stream: Option<u8>,
) -> ArgSpec {
    ArgSpec {
        bytes,
        device_ptr,
        out_device_ptr: out,
        stream,
        ..ArgSpec::GENERIC
    }
}

/// A launch of the kernel handle in argument `function`.
const fn launch(launch: Launch, function: u8) -> ArgSpec {
    ArgSpec {
        launch,
        handle: Some(function),
        ..ArgSpec::GENERIC
    }
}

/// A call that makes a handle and writes it through argument `out`, from the object in
/// argument `parent` (a getter) and the name in argument `name`.
const fn maker(out: u8, parent: Option<u8>, name: Option<u8>) -> ArgSpec {
    ArgSpec {
        out_device_ptr: Some(out),
        out: OutValue::Handle,
        parent,
        name,
        ..ArgSpec::GENERIC
    }
}

/// A call that uses or drops the handle in argument `handle` (an unload, a context made
/// current).
const fn user(handle: u8) -> ArgSpec {
    ArgSpec {
        handle: Some(handle),
        ..ArgSpec::GENERIC
    }
}

/// A call that writes device `device`'s UUID through argument `out`.
const fn uuid_of(out: u8, device: u8) -> ArgSpec {
    ArgSpec {
        out_device_ptr: Some(out),
        out: OutValue::Uuid,
        handle: Some(device),
        ..ArgSpec::GENERIC
    }
}

/// The default set: allocations, frees, copies, launches, syncs, module loads, contexts.
pub const DEFAULT_FUNCTIONS: &[(&str, ArgSpec)] = &[
    ("cuInit", ArgSpec::GENERIC),
    // Devices and contexts, so that every call has a GPU: a device's UUID (by ordinal), the
    // context each creation makes on its device (the row's handle, from the device in
    // `parent_handle`), and the context each thread has current.
    ("cuDeviceGetUuid", uuid_of(0, 1)),
    ("cuDeviceGetUuid_v2", uuid_of(0, 1)),
    ("cuDevicePrimaryCtxRetain", maker(0, Some(1), None)),
    ("cuCtxCreate_v2", maker(0, Some(2), None)),
    ("cuCtxCreate_v3", maker(0, Some(4), None)),
    ("cuCtxCreate_v4", maker(0, Some(3), None)),
    ("cuCtxSetCurrent", user(0)),
    ("cuCtxPushCurrent_v2", user(0)),
    ("cuCtxPopCurrent_v2", maker(0, None, None)),
    ("cuCtxDestroy_v2", user(0)),
    // The rest of what changes a kernel lookup's answer (roles::answer_change): rare calls,
    // probed so that repeated lookups may be counted at entry (cuda_lookup_memo.h). Later
    // API versions of these generic entries belong to them.
    ("cuCtxCreate", ArgSpec::GENERIC),
    ("cuCtxPushCurrent", ArgSpec::GENERIC),
    ("cuCtxPopCurrent", ArgSpec::GENERIC),
    ("cuCtxDestroy", ArgSpec::GENERIC),
    ("cuCtxAttach", ArgSpec::GENERIC),
    ("cuCtxDetach", ArgSpec::GENERIC),
    ("cuDevicePrimaryCtxRelease", ArgSpec::GENERIC),
    ("cuDevicePrimaryCtxReset", ArgSpec::GENERIC),
    ("cuGreenCtxDestroy", ArgSpec::GENERIC),
    ("cuMemAlloc_v2", spec(Some(1), None, Some(0), None)),
    ("cuMemAllocManaged", spec(Some(1), None, Some(0), None)),
    ("cuMemAllocAsync", spec(Some(1), None, Some(0), Some(2))),
    ("cuMemFree_v2", spec(None, Some(0), None, None)),
    ("cuMemFreeAsync", spec(None, Some(0), None, Some(1))),
    // Pitched, pool and pinned-host allocations. A pitched allocation's size is width x height
    // (two arguments), so it has no `bytes`; host pointers go where device pointers do.
    ("cuMemAllocPitch_v2", spec(None, None, Some(0), None)),
    (
        "cuMemAllocFromPoolAsync",
        spec(Some(1), None, Some(0), Some(3)),
    ),
    ("cuMemPoolTrimTo", spec(Some(1), None, None, None)),
    ("cuMemHostAlloc", spec(Some(1), None, Some(0), None)),
    ("cuMemAllocHost_v2", spec(Some(1), None, Some(0), None)),
    ("cuMemFreeHost", spec(None, Some(0), None, None)),
    // The virtual-memory API (PyTorch's expandable segments, NCCL, vLLM): a physical
    // allocation's handle goes where a device pointer does.
    ("cuMemCreate", spec(Some(1), None, Some(0), None)),
    ("cuMemRelease", spec(None, Some(0), None, None)),
    ("cuMemAddressReserve", spec(Some(1), None, Some(0), None)),
    ("cuMemAddressFree", spec(Some(1), Some(0), None, None)),
    (
        "cuMemMap",
        ArgSpec {
            handle: Some(3),
            ..spec(Some(1), Some(0), None, None)
        },
    ),
    ("cuMemUnmap", spec(Some(1), Some(0), None, None)),
    ("cuMemSetAccess", spec(Some(1), Some(0), None, None)),
    ("cuMemcpy", spec(Some(2), Some(0), None, None)),
    ("cuMemcpyHtoD_v2", spec(Some(2), Some(0), None, None)),
    ("cuMemcpyDtoH_v2", spec(Some(2), Some(1), None, None)),
    ("cuMemcpyDtoD_v2", spec(Some(2), Some(0), None, None)),
    ("cuMemcpyAsync", spec(Some(2), Some(0), None, Some(3))),
    (
        "cuMemcpyHtoDAsync_v2",
        spec(Some(2), Some(0), None, Some(3)),
    ),
    (
        "cuMemcpyDtoHAsync_v2",
        spec(Some(2), Some(1), None, Some(3)),
    ),
    (
        "cuMemcpyDtoDAsync_v2",
        spec(Some(2), Some(0), None, Some(3)),
    ),
    ("cuLaunchKernel", launch(Launch::Kernel, 0)),
    ("cuLaunchKernelEx", launch(Launch::KernelEx, 1)),
    ("cuGraphLaunch", spec(None, None, None, Some(1))),
    ("cuCtxSynchronize", ArgSpec::GENERIC),
    ("cuStreamSynchronize", spec(None, None, None, Some(0))),
    ("cuEventSynchronize", ArgSpec::GENERIC),
    // Module and library loads, with the handle each makes; the kernel handles made from them,
    // with their names (launch rows are named from these); unloads, which retire those names.
    ("cuModuleLoad", maker(0, None, None)),
    ("cuModuleLoadData", maker(0, None, None)),
    ("cuModuleLoadDataEx", maker(0, None, None)),
    ("cuModuleLoadFatBinary", maker(0, None, None)),
    ("cuLibraryLoadData", maker(0, None, None)),
    ("cuLibraryLoadFromFile", maker(0, None, None)),
    ("cuModuleGetFunction", maker(0, Some(1), Some(2))),
    ("cuLibraryGetKernel", maker(0, Some(1), Some(2))),
    ("cuKernelGetFunction", maker(0, Some(1), None)),
    ("cuModuleUnload", user(0)),
    ("cuLibraryUnload", user(0)),
];

/// Per-thread default-stream variants share their base function's arguments.
const STREAM_SUFFIXES: [&str; 2] = ["_ptsz", "_ptds"];

/// The default-set entry an exported symbol belongs to, with its argument spec.
///
/// `cuMemcpyAsync_ptsz` belongs to `cuMemcpyAsync`; a later API version of a generic entry
/// (`cuCtxSynchronize_v2`, `cuCtxCreate_v4`) belongs to it too, since only name, duration and
/// result are recorded. Later versions of entries with decoded arguments are not matched: their
/// argument lists may differ.
pub fn default_entry(symbol: &str) -> Option<(&'static str, ArgSpec)> {
    let base = STREAM_SUFFIXES
        .iter()
        .find_map(|suffix| symbol.strip_suffix(suffix))
        .unwrap_or(symbol);
    if let Some(&(name, spec)) = DEFAULT_FUNCTIONS.iter().find(|(name, _)| *name == base) {
        return Some((name, spec));
    }
    let (stem, version) = base.rsplit_once("_v")?;
    if version.is_empty() || !version.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    DEFAULT_FUNCTIONS.iter().copied().find(|&(name, spec)| {
        spec == ArgSpec::GENERIC
            && (name == stem || name.rsplit_once("_v").is_some_and(|(s, _)| s == stem))
    })
}

pub use super::roles::{kernel_role, KernelRole};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variants_map_to_their_base_entry() {
        assert_eq!(
            default_entry("cuMemAlloc_v2").map(|e| e.0),
            Some("cuMemAlloc_v2")
        );
        assert_eq!(
            default_entry("cuMemcpyHtoDAsync_v2_ptsz").map(|e| e.0),
            Some("cuMemcpyHtoDAsync_v2")
        );
        assert_eq!(
            default_entry("cuMemcpyDtoD_v2_ptds").map(|e| e.0),
            Some("cuMemcpyDtoD_v2")
        );
        assert_eq!(
            default_entry("cuLaunchKernelEx_ptsz").map(|e| e.0),
            Some("cuLaunchKernelEx")
        );
        assert_eq!(
            default_entry("cuCtxSynchronize_v2").map(|e| e.0),
            Some("cuCtxSynchronize")
        );
        assert_eq!(
            default_entry("cuCtxCreate_v4").map(|e| e.0),
            Some("cuCtxCreate_v4")
        );
        // A later version of a generic entry belongs to it (cuCtxCreate, which changes the
        // calling thread's context, is one).
        assert_eq!(
            default_entry("cuCtxCreate_v5").map(|e| e.0),
            Some("cuCtxCreate")
        );
        assert_eq!(default_entry("cuCtxGetDevice_v5"), None);
        // v1 of a decoded function has 32-bit pointers: not matched.
        assert_eq!(default_entry("cuMemAlloc"), None);
        assert_eq!(default_entry("cuMemAlloc_v3"), None);
        assert_eq!(default_entry("cuDeviceGetCount"), None);
        assert_eq!(default_entry("cuGetProcAddress_v2"), None);
    }

    #[test]
    fn cookie_packs_function_id_and_argument_positions() {
        let (_, alloc) = default_entry("cuMemAllocAsync").unwrap();
        let cookie = alloc.cookie(7);
        assert_eq!(cookie & 0xff_ffff, 7);
        assert_eq!((cookie >> 32) & 0xf, 1); // bytes
        assert_eq!((cookie >> 36) & 0xf, 0xf); // no device pointer argument
        assert_eq!((cookie >> 40) & 0xf, 0); // out pointer
        assert_eq!((cookie >> 44) & 0xf, 2); // stream
        assert_eq!((cookie >> 48) & 0xf, 0);
        let (_, ex) = default_entry("cuLaunchKernelEx").unwrap();
        assert_eq!((ex.cookie(1) >> 48) & 0xf, 2);
        assert_eq!(
            ArgSpec::GENERIC.cookie(3),
            3 | 0xf << 24 | 0xffff << 32 | 0xff << 54
        );
        let (_, launch) = default_entry("cuLaunchKernel").unwrap();
        assert_eq!((launch.cookie(1) >> 54) & 0xf, 0); // the CUfunction
        assert_eq!((ex.cookie(1) >> 54) & 0xf, 1);
        let (_, getter) = default_entry("cuLibraryGetKernel").unwrap();
        let cookie = getter.cookie(0x3f_ffff);
        assert_eq!(cookie & 0xff_ffff, 0x3f_ffff);
        assert_eq!((cookie >> 24) & 0xf, 2); // the name
        assert_eq!((cookie >> 40) & 0xf, 0); // the CUkernel written at return
        assert_eq!((cookie >> 54) & 0xf, 0xf);
        assert_eq!((cookie >> 58) & 0xf, 1); // the library
        assert_eq!(cookie >> 62, 1); // the out value is a handle
    }
}
