use std::sync::Arc;

use gpuship_sinks::schema::{CallObjects, CudaRow};

use super::*;

const UUID0: [u8; 16] = [0x11; 16];
const UUID1: [u8; 16] = [
    0xfe, 0xdc, 0xba, 0x98, 0x76, 0x54, 0x32, 0x10, 0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef,
];

fn row(pid: i32, tid: i32, handle: Option<u64>, parent: Option<u64>) -> CudaRow<'static> {
    CudaRow {
        pid,
        tid,
        objects: CallObjects {
            handle,
            parent_handle: parent,
            ..CallObjects::default()
        },
        ..gpuship_sinks::test_support::cuda_row()
    }
}

/// A node directory listing the GPU of `UUID1` at 0000:3b:00.0 (index 0) and another GPU.
fn two_gpu_node() -> (tempfile::TempDir, Arc<GpuDirectory>) {
    let dir = tempfile::tempdir().unwrap();
    for (bus, uuid) in [
        ("0000:3b:00.0", uuid_string(&UUID1)),
        (
            "0000:86:00.0",
            "GPU-00000000-0000-0000-0000-000000000001".to_string(),
        ),
    ] {
        std::fs::create_dir_all(dir.path().join(bus)).unwrap();
        std::fs::write(
            dir.path().join(bus).join("information"),
            format!(
                "Model: \t X\nGPU UUID: \t {}\nBus Location: \t {bus}\n",
                uuid.to_uppercase()
            ),
        )
        .unwrap();
    }
    let gpus = Arc::new(GpuDirectory::load(dir.path()));
    (dir, gpus)
}

fn uuid_of(gpu: Option<&Arc<CallGpu>>) -> Option<String> {
    gpu.map(|g| g.uuid.clone())
}

#[test]
fn uuid_bytes_print_as_the_driver_does() {
    assert_eq!(
        uuid_string(&UUID1),
        "GPU-fedcba98-7654-3210-0123-456789abcdef"
    );
    assert_eq!(
        uuid_string(&[0; 16]),
        "GPU-00000000-0000-0000-0000-000000000000"
    );
}

#[test]
fn each_thread_follows_its_own_context_stack_across_two_devices() {
    let (_dir, gpus) = two_gpu_node();
    let mut devices = CallDevices::new(gpus);
    let names = DeviceRole::NamesDevice;
    // Ordinal 0 is UUID0 (not on this node's list), ordinal 1 is UUID1 (listed).
    let (gpu, changed) = devices.observe(names, &row(7, 1, Some(0), None), Some(&UUID0));
    assert_eq!(gpu.as_ref().unwrap().pci_bus_id, None);
    assert!(changed.is_some());
    let (gpu, _) = devices.observe(
        names,
        &row(7, 1, Some(0xffff_ffff_0000_0001), None),
        Some(&UUID1),
    );
    assert_eq!(
        gpu.as_ref().unwrap().pci_bus_id.as_deref(),
        Some("0000:3b:00.0")
    );
    assert_eq!(gpu.as_ref().unwrap().index, Some(0));
    let retain = DeviceRole::MakesContext {
        becomes_current: false,
    };
    let create = DeviceRole::MakesContext {
        becomes_current: true,
    };
    devices.observe(retain, &row(7, 1, Some(0xa0), Some(0)), None);
    // Two devices' contexts: a thread with none has no GPU.
    devices.observe(create, &row(7, 2, Some(0xb0), Some(1)), None);
    assert_eq!(devices.gpu_of(7, 3), None);
    // cuCtxCreate made 0xb0 current on thread 2.
    assert_eq!(uuid_of(devices.gpu_of(7, 2)), Some(uuid_string(&UUID1)));
    devices.observe(DeviceRole::SetsCurrent, &row(7, 1, Some(0xa0), None), None);
    assert_eq!(uuid_of(devices.gpu_of(7, 1)), Some(uuid_string(&UUID0)));
    devices.observe(
        DeviceRole::PushesCurrent,
        &row(7, 1, Some(0xb0), None),
        None,
    );
    assert_eq!(uuid_of(devices.gpu_of(7, 1)), Some(uuid_string(&UUID1)));
    devices.observe(DeviceRole::PopsCurrent, &row(7, 1, Some(0xb0), None), None);
    assert_eq!(uuid_of(devices.gpu_of(7, 1)), Some(uuid_string(&UUID0)));
    // A failed call changes nothing.
    let mut failed = row(7, 1, Some(0xb0), None);
    failed.result = 201;
    let (_, changed) = devices.observe(DeviceRole::SetsCurrent, &failed, None);
    assert!(changed.is_none());
    assert_eq!(uuid_of(devices.gpu_of(7, 1)), Some(uuid_string(&UUID0)));
    // cuCtxSetCurrent(NULL) unbinds: back to "no single device".
    devices.observe(DeviceRole::SetsCurrent, &row(7, 1, Some(0), None), None);
    assert_eq!(devices.gpu_of(7, 1), None);
    // Destroying 0xb0 leaves the process one device: every thread without a context has it.
    devices.observe(
        DeviceRole::DestroysContext,
        &row(7, 2, Some(0xb0), None),
        None,
    );
    assert_eq!(uuid_of(devices.gpu_of(7, 2)), Some(uuid_string(&UUID0)));
    assert_eq!(uuid_of(devices.gpu_of(7, 9)), Some(uuid_string(&UUID0)));
    // Another process knows nothing; with two GPUs on the node that is no GPU.
    assert_eq!(devices.gpu_of(8, 8), None);
}

#[test]
fn a_single_gpu_node_gives_every_call_its_gpu_and_unknown_uuids_stay_unlisted() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("0000:06:00.0")).unwrap();
    std::fs::write(
        dir.path().join("0000:06:00.0/information"),
        "GPU UUID: \t GPU-aaaaaaaa-0000-0000-0000-000000000000\nBus Location: \t 0000:06:00.0\n",
    )
    .unwrap();
    let mut devices = CallDevices::new(Arc::new(GpuDirectory::load(dir.path())));
    let (gpu, changed) = devices.observe(DeviceRole::None, &row(5, 5, None, None), None);
    assert!(changed.is_none());
    let gpu = gpu.unwrap();
    assert_eq!(gpu.uuid, "GPU-aaaaaaaa-0000-0000-0000-000000000000");
    assert_eq!(gpu.pci_bus_id.as_deref(), Some("0000:06:00.0"));
    // No node GPUs at all: no GPU.
    let mut bare = CallDevices::new(Arc::new(GpuDirectory::default()));
    assert_eq!(bare.gpu_of(5, 5), None);
}

#[test]
fn bounds_hold_for_hostile_handles_and_thread_counts() {
    let mut devices = CallDevices::new(Arc::new(GpuDirectory::default()));
    devices.observe(
        DeviceRole::NamesDevice,
        &row(1, 1, Some(u64::MAX), None),
        Some(&UUID0),
    );
    let create = DeviceRole::MakesContext {
        becomes_current: true,
    };
    // Device argument with garbage in the upper half is ordinal -1: the UUID asked for with
    // the same int.
    devices.observe(
        create,
        &row(1, 1, Some(1), Some(0xdead_beef_ffff_ffff)),
        None,
    );
    assert_eq!(uuid_of(devices.gpu_of(1, 1)), Some(uuid_string(&UUID0)));
    for tid in 0..(MAX_THREADS as i32 + 10) {
        devices.observe(DeviceRole::PushesCurrent, &row(1, tid, Some(1), None), None);
    }
    let process = devices.processes.get(&1).unwrap();
    assert!(process.threads.len() <= MAX_THREADS);
    for _ in 0..(MAX_STACK + 5) {
        devices.observe(DeviceRole::PushesCurrent, &row(1, 3, Some(1), None), None);
    }
    assert!(devices.processes.get(&1).unwrap().threads[&3].len() <= MAX_STACK);
    // Pops beyond the stack are harmless.
    for _ in 0..(MAX_STACK + 5) {
        devices.observe(DeviceRole::PopsCurrent, &row(1, 3, None, None), None);
    }
    assert_eq!(uuid_of(devices.gpu_of(1, 3)), Some(uuid_string(&UUID0)));
}

#[test]
fn answers_stay_right_past_their_bound_and_when_a_process_exits() {
    let (_node, gpus) = two_gpu_node();
    let mut devices = CallDevices::new(gpus);
    devices.observe(
        DeviceRole::NamesDevice,
        &row(7, 1, Some(0), None),
        Some(&UUID1),
    );
    let retain = DeviceRole::MakesContext {
        becomes_current: false,
    };
    devices.observe(retain, &row(7, 1, Some(0xa0), Some(0)), None);
    // One device: every thread of pid 7 has it, however many threads ask.
    for tid in 0..(MAX_ANSWERS as i32 + 10) {
        assert_eq!(uuid_of(devices.gpu_of(7, tid)), Some(uuid_string(&UUID1)));
    }
    assert!(devices.answers.len() <= MAX_ANSWERS);
    assert_eq!(devices.gpu_of(8, 1), None);
    // pid 7 exits (its folder is gone from the proc dir, pid 8's is there): its answers go
    // with it, and with two GPUs on the node it has none.
    let proc_dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(proc_dir.path().join("8")).unwrap();
    assert_eq!(devices.forget_exited(proc_dir.path()), vec![7]);
    assert_eq!(devices.gpu_of(7, 1), None);
    assert_eq!(devices.gpu_of(7, MAX_ANSWERS as i32), None);
}
