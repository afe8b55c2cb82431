use super::*;
use crate::enrich::Clocks;
use crate::sources::functions::FunctionTable;
use gpuship_sinks::schema::{CallObjects, LaunchDims};

fn history() -> CudaLaunchHistory {
    let functions = FunctionTable::from_names(["cuLaunchKernel", "cuLaunchKernelEx"]);
    let roles = RoleTable::new(&functions);
    let decoder = Decoder::new(Clocks::fixed(0, 0), functions);
    CudaLaunchHistory::new(None, decoder, roles, None)
}

fn launch(pid: i32, time_ns: i64, handle: u64, stream: u64) -> CudaRow<'static> {
    CudaRow {
        pid,
        tid: pid + 1,
        time_ns,
        stream: Some(stream),
        launch: Some(LaunchDims {
            grid: [u32::MAX, 2, 3],
            block: [128, 1, 1],
            shared_mem_bytes: 0,
            registers_only: false,
        }),
        objects: CallObjects {
            handle: Some(handle),
            ..CallObjects::default()
        },
        ..gpuship_sinks::test_support::cuda_row()
    }
}

fn sync(pid: i32, time_ns: i64, stream: Option<u64>, result: u32) -> CudaRow<'static> {
    CudaRow {
        pid,
        // The launching thread of `launch(pid, ..)`.
        tid: pid + 1,
        time_ns,
        stream,
        result,
        ..gpuship_sinks::test_support::cuda_row()
    }
}

fn names(suspects: &[KernelSuspect]) -> Vec<(String, i64, bool)> {
    suspects
        .iter()
        .map(|s| (s.kernel_name.clone(), s.time_ns, s.completed))
        .collect()
}

#[test]
fn suspects_are_the_last_launches_before_the_xid_most_recent_first() {
    let history = history();
    {
        let mut state = history.lock();
        let a = Arc::new(KernelName::new("_Z1av"));
        state.launched(&launch(7, 100, 0xa, 0x50), 0, Some(a.clone()), None);
        state.launched(&launch(7, 200, 0xb, 0x60), 1, None, None);
        state.launched(&launch(7, 300, 0xa, 0x60), 0, Some(a), None);
        // After the XID, another process's, and a failed one (never ran): not suspects.
        state.launched(&launch(7, 501, 0xa, 0x50), 0, None, None);
        state.launched(&launch(8, 250, 0xa, 0x50), 0, None, None);
        let failed = CudaRow {
            result: 1,
            ..launch(7, 260, 0xc, 0x50)
        };
        state.launched(&failed, 0, None, None);
        // Stream 0x50 synchronised after the first launch; a failed sync proves nothing.
        state.synchronized(KernelRole::SyncsStream, &sync(7, 150, Some(0x50), 0));
        state.synchronized(KernelRole::SyncsStream, &sync(7, 400, Some(0x60), 700));
    }
    let found = history.suspects(7, None, 500, 8);
    assert_eq!(
        names(&found),
        [
            ("_Z1av".to_string(), 300, false),
            ("unknown".to_string(), 200, false),
            ("_Z1av".to_string(), 100, true),
        ]
    );
    let first = &found[0];
    assert_eq!(
        (
            first.tid,
            first.handle,
            first.stream,
            first.function.as_str()
        ),
        (8, 0xa, Some(0x60), "cuLaunchKernel")
    );
    assert_eq!(first.grid, [Some(u32::MAX), Some(2), Some(3)]);
    assert_eq!(first.block, [Some(128), Some(1), Some(1)]);
    assert_eq!(found[1].function, "cuLaunchKernelEx");
    assert_eq!(first.kernel_name_demangled, "a()");
    assert_eq!(history.suspects(7, None, 500, 1).len(), 1);
    assert_eq!(history.suspects(7, None, 99, 8), []);
    assert_eq!(history.suspects(9, None, i64::MAX, 8), []);
    // A context synchronisation of another thread covers nothing (its context may be
    // another); one of the launching thread covers every launch that returned before it
    // began (launches last 5 ns here: the one at 200 returned at 205).
    let other_thread = CudaRow {
        tid: 99,
        ..sync(7, 400, None, 0)
    };
    history
        .lock()
        .synchronized(KernelRole::SyncsContext, &other_thread);
    assert!(history
        .suspects(7, None, 500, 8)
        .iter()
        .skip(1)
        .all(|s| !s.completed || s.time_ns == 100));
    history
        .lock()
        .synchronized(KernelRole::SyncsContext, &sync(7, 204, None, 0));
    assert_eq!(
        history
            .suspects(7, None, 500, 8)
            .iter()
            .map(|s| s.completed)
            .collect::<Vec<_>>(),
        [false, false, true]
    );
    history
        .lock()
        .synchronized(KernelRole::SyncsContext, &sync(7, 250, None, 0));
    assert_eq!(
        names(&history.suspects(7, None, 500, 8))
            .iter()
            .map(|s| s.2)
            .collect::<Vec<_>>(),
        [false, true, true]
    );
}

#[test]
fn each_process_keeps_its_last_launches_only() {
    let history = history();
    {
        let mut state = history.lock();
        for time in 0..(MAX_SUSPECTS as i64 + 10) {
            state.launched(&launch(7, time, time as u64, 0), 0, None, None);
        }
    }
    let found = history.suspects(7, None, i64::MAX, usize::MAX);
    assert_eq!(found.len(), MAX_SUSPECTS);
    assert_eq!(found[0].time_ns, MAX_SUSPECTS as i64 + 9);
    assert_eq!(found[MAX_SUSPECTS - 1].time_ns, 10);
}

#[test]
fn registers_only_launches_have_no_block_z() {
    let history = history();
    let mut row = launch(7, 1, 0xa, 0);
    row.stream = None;
    row.launch = Some(LaunchDims {
        registers_only: true,
        ..row.launch.unwrap()
    });
    history.lock().launched(&row, 0, None, None);
    let found = history.suspects(7, None, 1, 8);
    assert_eq!(found[0].block, [Some(128), Some(1), None]);
    assert_eq!(found[0].stream, None);
    // Without a stream only a context synchronisation can show it finished.
    history
        .lock()
        .synchronized(KernelRole::SyncsStream, &sync(7, 5, Some(0), 0));
    assert!(!history.suspects(7, None, 10, 8)[0].completed);
}

#[test]
fn exited_processes_are_forgotten() {
    let proc_dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(proc_dir.path().join("7")).unwrap();
    let history = history();
    {
        let mut state = history.lock();
        state.launched(&launch(7, 1, 0xa, 0), 0, None, None);
        state.launched(&launch(8, 1, 0xa, 0), 0, None, None);
        state
            .kernels
            .learned(8, 0xa, 0, Arc::new(KernelName::new("k")), 0);
        state.forget_exited(proc_dir.path());
    }
    // Gone at one check: kept, for an XID that arrives just after its process died.
    assert_eq!(history.suspects(8, None, 1, 8).len(), 1);
    assert!(history.lock().kernels.get_at(8, 0xa, 1).is_some());
    history.lock().forget_exited(proc_dir.path());
    assert_eq!(history.suspects(7, None, 1, 8).len(), 1);
    assert_eq!(history.suspects(8, None, 1, 8), []);
    assert!(history.lock().kernels.is_empty());
}

#[test]
fn an_xid_on_one_gpu_suspects_launches_on_it_or_on_an_unknown_gpu() {
    let history = history();
    let gpu = |bus: &str| {
        Some(Arc::new(CallGpu {
            uuid: format!("GPU-{bus}"),
            pci_bus_id: Some(bus.to_string()),
            index: Some(0),
        }))
    };
    {
        let mut state = history.lock();
        state.launched(&launch(7, 100, 0xa, 0), 0, None, gpu("0000:3b:00.0"));
        state.launched(&launch(7, 200, 0xb, 0), 0, None, gpu("0000:86:00.0"));
        state.launched(&launch(7, 300, 0xc, 0), 0, None, None);
    }
    let handles = |bus: Option<&str>| {
        history
            .suspects(7, bus, i64::MAX, 8)
            .iter()
            .map(|s| s.handle)
            .collect::<Vec<_>>()
    };
    assert_eq!(handles(Some("0000:3b:00.0")), [0xc, 0xa]);
    assert_eq!(handles(Some("0000:3B:00.0")), [0xc, 0xa]);
    assert_eq!(handles(Some("0000:86:00.0")), [0xc, 0xb]);
    assert_eq!(handles(None), [0xc, 0xb, 0xa]);
}
