//! The kernel-name table applied to CUDA rows: what a row teaches the table (a named handle, a
//! function of a kernel, an unload) and the name a launch row gets from it.

use std::path::Path;
use std::sync::Arc;

use gpuship_sinks::schema::CudaRow;

use super::name::{read_process_string, KernelName, UNKNOWN};
use super::{KernelNames, Lookup};
use crate::sources::cuda::catalog::KernelRole;
use crate::sources::cuda::decode::RecordName;

/// The kernel name a named record carries, None when the probe could not read it. A name the
/// probe had to cut is completed from the process's memory for a call that succeeded (`ok`;
/// the process may be gone by then: the cut name is kept, and logged); a failed call's name is
/// kept as read, so a process looping on lookups of long nonexistent names costs no reads.
pub fn record_kernel_name(
    name: &RecordName,
    pid: i32,
    proc_dir: &Path,
    ok: bool,
) -> Option<Arc<KernelName>> {
    if name.unreadable {
        return None;
    }
    let mut bytes = std::borrow::Cow::Borrowed(&name.bytes[..]);
    if name.maybe_truncated && ok {
        match read_process_string(proc_dir, pid, name.address) {
            Some(full) if full.starts_with(&name.bytes) => bytes = full.into(),
            _ => tracing::warn!(
                pid,
                kept_bytes = name.bytes.len(),
                "a kernel name longer than the probe's buffer could not be read from the process: kept cut"
            ),
        }
    }
    Some(Arc::new(KernelName::new(&String::from_utf8_lossy(&bytes))))
}

/// Updates `kernels` with what a row of `role` tells (only successful calls make or drop
/// handles); `name` is the kernel name its record carried.
pub fn learn(
    kernels: &mut KernelNames,
    role: KernelRole,
    row: &CudaRow<'_>,
    name: Option<&Arc<KernelName>>,
) {
    if row.result != 0 {
        return;
    }
    let (Some(handle), parent) = (row.objects.handle, row.objects.parent_handle) else {
        return;
    };
    match role {
        KernelRole::Names => {
            if let Some(name) = name {
                kernels.learned(
                    row.pid,
                    handle,
                    parent.unwrap_or(0),
                    Arc::clone(name),
                    row.time_ns,
                );
            }
        }
        KernelRole::FunctionOfKernel => {
            if let Some(kernel) = parent {
                kernels.function_of(row.pid, handle, kernel, row.time_ns);
            }
        }
        KernelRole::Unloads => {
            kernels.unloaded(row.pid, handle, row.time_ns);
        }
        _ => {}
    }
}

/// The kernel a row of `role` is about, from `kernels`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolved {
    /// Not a launch, nor a `cuKernelGetFunction` of a known kernel.
    Nothing,
    /// A known kernel.
    Named(Arc<KernelName>),
    /// A launch of a handle never announced (made before the agent started).
    Unknown,
}

/// What `kernels` says about a row of `role`: a launch's kernel (unknown when its handle was
/// never announced) or the kernel a `cuKernelGetFunction` made a function of.
pub fn resolve(kernels: &mut KernelNames, role: KernelRole, row: &CudaRow<'_>) -> Resolved {
    if !matches!(role, KernelRole::Launch | KernelRole::FunctionOfKernel) {
        return Resolved::Nothing;
    }
    let Some(handle) = row.objects.handle else {
        return Resolved::Nothing;
    };
    match kernels.lookup(row.pid, handle) {
        Lookup::Named(_) => Resolved::Named(kernels.get(row.pid, handle).expect("just found")),
        Lookup::Unknown if role == KernelRole::Launch => Resolved::Unknown,
        Lookup::Unknown => Resolved::Nothing,
    }
}

/// What a launch decoded after the fact (a flight-recorder row) ran: the name its handle had
/// at the launch's time, even if an unload retired it since.
pub fn resolve_at(kernels: &KernelNames, role: KernelRole, row: &CudaRow<'_>) -> Resolved {
    let Some(handle) = row.objects.handle.filter(|_| role == KernelRole::Launch) else {
        return Resolved::Nothing;
    };
    match kernels.get_at(row.pid, handle, row.time_ns) {
        Some(name) => Resolved::Named(name),
        None => Resolved::Unknown,
    }
}

/// Sets a row's kernel names from what it resolved to.
pub fn apply<'a>(row: &mut CudaRow<'a>, resolved: &'a Resolved) {
    let (mangled, demangled) = match resolved {
        Resolved::Nothing => return,
        Resolved::Named(name) => (&*name.mangled, &*name.demangled),
        Resolved::Unknown => (UNKNOWN, UNKNOWN),
    };
    row.objects.kernel_name = Some(mangled);
    row.objects.kernel_name_demangled = Some(demangled);
}

#[cfg(test)]
mod tests;
