//! The kernel-name table applied to CUDA rows: what a row teaches the table (a named handle, a
//! function of a kernel, an unload) and the names a launch row gets from it.

use std::path::Path;
use std::sync::Arc;

use gpuship_sinks::schema::CudaRow;

use super::name::{read_process_string, KernelName, UNKNOWN};
use super::{KernelNames, Lookup};
use crate::sources::cuda::catalog::KernelRole;
use crate::sources::cuda::decode::RecordName;

/// The kernel name a named record carries, completed from the process's memory when the probe
/// had to cut it (the process may be gone by then: the cut name is kept, and logged).
pub fn record_kernel_name(name: &RecordName, pid: i32, proc_dir: &Path) -> Arc<KernelName> {
    let mut bytes = std::borrow::Cow::Borrowed(&name.bytes[..]);
    if name.maybe_truncated {
        match read_process_string(proc_dir, pid, name.address) {
            Some(full) if full.starts_with(&name.bytes) => bytes = full.into(),
            _ => tracing::warn!(
                pid,
                kept_bytes = name.bytes.len(),
                "a kernel name longer than the probe's buffer could not be read from the process: kept cut"
            ),
        }
    }
    Arc::new(KernelName::new(&String::from_utf8_lossy(&bytes)))
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
                kernels.learned(row.pid, handle, parent.unwrap_or(0), Arc::clone(name));
            }
        }
        KernelRole::FunctionOfKernel => {
            if let Some(kernel) = parent {
                kernels.function_of(row.pid, handle, kernel);
            }
        }
        KernelRole::Unloads => {
            kernels.unloaded(row.pid, handle);
        }
        KernelRole::Launch | KernelRole::None => {}
    }
}

/// Sets the kernel names of a row of `role` from `kernels`: a launch's kernel (`unknown` when
/// its handle was never announced) or the function a `cuKernelGetFunction` made. Returns true
/// for a launch of an unknown handle.
pub fn name_row<'a>(kernels: &'a mut KernelNames, role: KernelRole, row: &mut CudaRow<'a>) -> bool {
    if !matches!(role, KernelRole::Launch | KernelRole::FunctionOfKernel) {
        return false;
    }
    let Some(handle) = row.objects.handle else {
        return false;
    };
    match kernels.lookup(row.pid, handle) {
        Lookup::Named(name) => {
            row.objects.kernel_name = Some(&name.mangled);
            row.objects.kernel_name_demangled = Some(&name.demangled);
            false
        }
        Lookup::Unknown if role == KernelRole::Launch => {
            row.objects.kernel_name = Some(UNKNOWN);
            row.objects.kernel_name_demangled = Some(UNKNOWN);
            true
        }
        Lookup::Unknown => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuship_sinks::schema::CallObjects;

    fn row(pid: i32, result: u32, handle: Option<u64>, parent: Option<u64>) -> CudaRow<'static> {
        CudaRow {
            pid,
            result,
            objects: CallObjects {
                handle,
                parent_handle: parent,
                ..CallObjects::default()
            },
            ..gpuship_sinks::test_support::cuda_row()
        }
    }

    #[test]
    fn launches_are_named_from_what_earlier_rows_taught() {
        let mut kernels = KernelNames::new();
        let name = Arc::new(KernelName::new("_Z10wild_writePi"));
        learn(
            &mut kernels,
            KernelRole::Names,
            &row(7, 0, Some(0x100), Some(0x4d00)),
            Some(&name),
        );
        learn(
            &mut kernels,
            KernelRole::FunctionOfKernel,
            &row(7, 0, Some(0x101), Some(0x100)),
            None,
        );
        // A failed getter teaches nothing.
        learn(
            &mut kernels,
            KernelRole::Names,
            &row(7, 500, Some(0x200), Some(0x4d00)),
            Some(&name),
        );
        let mut launch = row(7, 0, Some(0x101), None);
        assert!(!name_row(&mut kernels, KernelRole::Launch, &mut launch));
        assert_eq!(launch.objects.kernel_name, Some("_Z10wild_writePi"));
        assert_eq!(
            launch.objects.kernel_name_demangled,
            Some("wild_write(int*)")
        );
        let mut unknown = row(7, 0, Some(0x200), None);
        assert!(name_row(&mut kernels, KernelRole::Launch, &mut unknown));
        assert_eq!(unknown.objects.kernel_name, Some("unknown"));
        // Not a launch: not counted, not named.
        let mut other = row(7, 0, Some(0x200), None);
        assert!(!name_row(
            &mut kernels,
            KernelRole::FunctionOfKernel,
            &mut other
        ));
        assert_eq!(other.objects.kernel_name, None);
        learn(
            &mut kernels,
            KernelRole::Unloads,
            &row(7, 0, Some(0x4d00), None),
            None,
        );
        assert!(kernels.is_empty());
    }

    #[test]
    fn a_cut_name_is_completed_from_the_process() {
        let full = std::ffi::CString::new(format!("long_{}", "x".repeat(2995))).unwrap();
        let cut = RecordName {
            bytes: full.as_bytes()[..1023].to_vec(),
            address: full.as_ptr() as u64,
            maybe_truncated: true,
            unreadable: false,
        };
        let pid = std::process::id() as i32;
        let name = record_kernel_name(&cut, pid, Path::new("/proc"));
        assert_eq!(name.mangled.len(), 3000);
        // Gone, or memory that does not start with what the probe read: the cut name is kept.
        let name = record_kernel_name(&cut, i32::MAX, Path::new("/proc"));
        assert_eq!(name.mangled.len(), 1023);
        let elsewhere = RecordName {
            address: cut.bytes.as_ptr() as u64 + 1,
            ..cut.clone()
        };
        assert_eq!(
            record_kernel_name(&elsewhere, pid, Path::new("/proc"))
                .mangled
                .len(),
            1023
        );
        // Invalid UTF-8 is replaced, never rejected.
        let odd = RecordName {
            bytes: vec![b'k', 0xff, b'\n'],
            address: 0,
            maybe_truncated: false,
            unreadable: false,
        };
        assert_eq!(
            &*record_kernel_name(&odd, pid, Path::new("/proc")).mangled,
            "k\u{fffd}\n"
        );
    }
}
