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
    let getter = row(7, 0, Some(0x100), Some(0x4d00));
    learn(&mut kernels, KernelRole::Names, &getter, Some(&name));
    let function = row(7, 0, Some(0x101), Some(0x100));
    learn(&mut kernels, KernelRole::FunctionOfKernel, &function, None);
    // A failed getter teaches nothing.
    let failed = row(7, 500, Some(0x200), Some(0x4d00));
    learn(&mut kernels, KernelRole::Names, &failed, Some(&name));
    let mut launch = row(7, 0, Some(0x101), None);
    let resolved = resolve(&mut kernels, KernelRole::Launch, &launch);
    apply(&mut launch, &resolved);
    assert_eq!(launch.objects.kernel_name, Some("_Z10wild_writePi"));
    assert_eq!(
        launch.objects.kernel_name_demangled,
        Some("wild_write(int*)")
    );
    let mut unknown = row(7, 0, Some(0x200), None);
    let resolved = resolve(&mut kernels, KernelRole::Launch, &unknown);
    assert_eq!(resolved, Resolved::Unknown);
    apply(&mut unknown, &resolved);
    assert_eq!(unknown.objects.kernel_name, Some("unknown"));
    // Not a launch: nothing to name.
    let other = row(7, 0, Some(0x200), None);
    assert_eq!(
        resolve(&mut kernels, KernelRole::FunctionOfKernel, &other),
        Resolved::Nothing
    );
    assert_eq!(
        resolve(&mut kernels, KernelRole::SyncsContext, &launch),
        Resolved::Nothing
    );
    learn(
        &mut kernels,
        KernelRole::Unloads,
        &row(7, 0, Some(0x4d00), None),
        None,
    );
    assert!(kernels.is_empty());
    // Decoded after the fact, a launch gets the name its handle had at its time.
    let mut recorded = row(7, 0, Some(0x101), None);
    let resolved = resolve_at(&kernels, KernelRole::Launch, &recorded);
    apply(&mut recorded, &resolved);
    // (Every row here is at time 0: the kernel lived from 0 until 0, so not at 0.)
    assert_eq!(recorded.objects.kernel_name, Some("unknown"));
}

#[test]
fn a_cut_name_is_completed_from_the_process() {
    let full = std::ffi::CString::new(format!("long_{}", "x".repeat(9995))).unwrap();
    let cut = RecordName {
        bytes: full.as_bytes()[..4095].to_vec(),
        address: full.as_ptr() as u64,
        maybe_truncated: true,
        unreadable: false,
    };
    let pid = std::process::id() as i32;
    let proc_dir = Path::new("/proc");
    let read = |name: &RecordName, pid: i32, ok: bool| {
        record_kernel_name(name, pid, proc_dir, ok).map(|n| n.mangled.len())
    };
    assert_eq!(read(&cut, pid, true), Some(10_000));
    // A failed lookup's name is kept as read; so is one whose process is gone, or whose memory
    // does not start with what the probe read.
    assert_eq!(read(&cut, pid, false), Some(4095));
    assert_eq!(read(&cut, i32::MAX, true), Some(4095));
    let elsewhere = RecordName {
        address: full.as_ptr() as u64 + 1,
        ..cut.clone()
    };
    assert_eq!(read(&elsewhere, pid, true), Some(4095));
    // Unreadable: no name at all (its launches read `unknown`, never an empty name).
    let unreadable = RecordName {
        bytes: Vec::new(),
        unreadable: true,
        ..cut.clone()
    };
    assert_eq!(read(&unreadable, pid, true), None);
    // Invalid UTF-8 is replaced, never rejected.
    let odd = RecordName {
        bytes: vec![b'k', 0xff, b'\n'],
        address: 0,
        maybe_truncated: false,
        unreadable: false,
    };
    assert_eq!(
        &*record_kernel_name(&odd, pid, proc_dir, true)
            .unwrap()
            .mangled,
        "k\u{fffd}\n"
    );
}
