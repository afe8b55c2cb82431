use super::*;
use gpuship_sinks::schema::CallObjects;

fn gpu(bus: &str) -> Arc<CallGpu> {
    Arc::new(CallGpu {
        uuid: format!("GPU-{bus}"),
        pci_bus_id: Some(bus.to_string()),
        index: Some(0),
    })
}

fn call(
    pid: i32,
    result: u32,
    bytes: Option<u64>,
    pointer: Option<u64>,
    handle: Option<u64>,
) -> CudaRow<'static> {
    CudaRow {
        pid,
        result,
        bytes,
        device_ptr: pointer,
        time_ns: pointer.unwrap_or(0) as i64 & 0xffff,
        objects: CallObjects {
            handle,
            ..CallObjects::default()
        },
        ..gpuship_sinks::test_support::cuda_row()
    }
}

fn name(id: u32) -> String {
    format!("f{id}")
}

fn apply(
    ledger: &mut MemoryLedger,
    role: MemoryRole,
    row: CudaRow<'static>,
    gpu: Option<&Arc<CallGpu>>,
) -> Option<HeldMemory> {
    ledger.apply(role, &row, gpu, 3, name)
}

const DEVICE: MemoryRole = MemoryRole::Allocates(MemoryKind::Device);
const POOL: MemoryRole = MemoryRole::Allocates(MemoryKind::Pool);
const HOST: MemoryRole = MemoryRole::Allocates(MemoryKind::HostPinned);

#[test]
fn every_kind_is_held_until_freed_per_gpu() {
    let (a, b) = (gpu("0000:3b:00.0"), gpu("0000:86:00.0"));
    let mut ledger = MemoryLedger::default();
    apply(
        &mut ledger,
        MemoryRole::Initializes,
        call(7, 0, None, None, None),
        None,
    );
    apply(
        &mut ledger,
        DEVICE,
        call(7, 0, Some(1 << 20), Some(0x1000), None),
        Some(&a),
    );
    apply(
        &mut ledger,
        DEVICE,
        call(7, 0, Some(2 << 20), Some(0x2000), None),
        Some(&b),
    );
    apply(
        &mut ledger,
        POOL,
        call(7, 0, Some(8192), Some(0x3000), None),
        Some(&a),
    );
    apply(
        &mut ledger,
        HOST,
        call(7, 0, Some(65536), Some(0x4000), None),
        Some(&a),
    );
    let managed = MemoryRole::Allocates(MemoryKind::Managed);
    apply(
        &mut ledger,
        managed,
        call(7, 0, Some(u64::MAX), Some(0x5000), None),
        Some(&a),
    );
    // A pitched allocation has no byte count: counted, 0 bytes.
    apply(
        &mut ledger,
        DEVICE,
        call(7, 0, None, Some(0x6000), None),
        Some(&a),
    );
    let holders = ledger.holders();
    assert_eq!(holders.len(), 2);
    assert_eq!(holders[0].gpu.as_ref(), Some(&a));
    assert_eq!(holders[0].held.bytes, [1 << 20, u64::MAX, 65536, 8192, 0]);
    assert_eq!(holders[0].held.allocations, 5);
    assert!(holders[0].complete);
    assert_eq!(holders[1].held.bytes, [2 << 20, 0, 0, 0, 0]);
    // Frees of each kind; the pool allocation freed by cuMemFree_v2 (allowed by CUDA).
    for pointer in [0x1000, 0x3000, 0x4000, 0x5000, 0x6000] {
        apply(
            &mut ledger,
            MemoryRole::Frees,
            call(7, 0, None, Some(pointer), None),
            Some(&a),
        );
    }
    let holders = ledger.holders();
    assert_eq!(holders.len(), 1);
    assert_eq!(holders[0].gpu.as_ref(), Some(&b));
    // A failed free changes nothing; cuMemFree(0) is a no-op; a free of an unknown pointer
    // marks the process incomplete.
    apply(
        &mut ledger,
        MemoryRole::Frees,
        call(7, 1, None, Some(0x2000), None),
        Some(&b),
    );
    apply(
        &mut ledger,
        MemoryRole::Frees,
        call(7, 0, None, Some(0), None),
        Some(&b),
    );
    assert!(ledger.holders()[0].complete);
    apply(
        &mut ledger,
        MemoryRole::Frees,
        call(7, 0, None, Some(0x9999), None),
        Some(&b),
    );
    assert_eq!(ledger.holders()[0].held.bytes, [2 << 20, 0, 0, 0, 0]);
    assert!(!ledger.holders()[0].complete);
}

#[test]
fn physical_memory_is_held_until_released_and_unmapped() {
    let a = gpu("0000:3b:00.0");
    let mut ledger = MemoryLedger::default();
    let create = |h: u64, bytes: u64| call(7, 0, Some(bytes), Some(h), None);
    apply(
        &mut ledger,
        MemoryRole::CreatesPhysical,
        create(0xa, 2 << 20),
        Some(&a),
    );
    apply(
        &mut ledger,
        MemoryRole::CreatesPhysical,
        create(0xb, 20 << 20),
        Some(&a),
    );
    // Both mapped into one reserved range, side by side.
    apply(
        &mut ledger,
        MemoryRole::Maps,
        call(7, 0, Some(2 << 20), Some(0x10_0000_0000), Some(0xa)),
        Some(&a),
    );
    apply(
        &mut ledger,
        MemoryRole::Maps,
        call(7, 0, Some(20 << 20), Some(0x10_0020_0000), Some(0xb)),
        Some(&a),
    );
    // PyTorch's order: release right after mapping; the memory stays held while mapped.
    apply(
        &mut ledger,
        MemoryRole::ReleasesPhysical,
        call(7, 0, None, Some(0xa), None),
        Some(&a),
    );
    apply(
        &mut ledger,
        MemoryRole::ReleasesPhysical,
        call(7, 0, None, Some(0xb), None),
        Some(&a),
    );
    assert_eq!(ledger.holders()[0].held.of(MemoryKind::Physical), 22 << 20);
    // Unmapping the first page range frees 0xa only.
    apply(
        &mut ledger,
        MemoryRole::Unmaps,
        call(7, 0, Some(2 << 20), Some(0x10_0000_0000), None),
        Some(&a),
    );
    assert_eq!(ledger.holders()[0].held.of(MemoryKind::Physical), 20 << 20);
    // One unmap over the whole range frees the rest.
    apply(
        &mut ledger,
        MemoryRole::Unmaps,
        call(7, 0, Some(1 << 40), Some(0x10_0000_0000), None),
        Some(&a),
    );
    assert_eq!(ledger.holders(), []);
    assert_eq!(ledger.entries, 0);
    // Unmapped first, released later: freed at the release.
    apply(
        &mut ledger,
        MemoryRole::CreatesPhysical,
        create(0xc, 4096),
        Some(&a),
    );
    apply(
        &mut ledger,
        MemoryRole::Maps,
        call(7, 0, Some(4096), Some(0x20_0000_0000), Some(0xc)),
        Some(&a),
    );
    apply(
        &mut ledger,
        MemoryRole::Unmaps,
        call(7, 0, Some(4096), Some(0x20_0000_0000), None),
        Some(&a),
    );
    assert_eq!(ledger.holders()[0].held.of(MemoryKind::Physical), 4096);
    apply(
        &mut ledger,
        MemoryRole::ReleasesPhysical,
        call(7, 0, None, Some(0xc), None),
        Some(&a),
    );
    assert_eq!(ledger.holders(), []);
    // Hostile values: an unmap at the top of the address space, a map of an unknown handle.
    apply(
        &mut ledger,
        MemoryRole::Unmaps,
        call(7, 0, Some(u64::MAX), Some(u64::MAX), None),
        Some(&a),
    );
    apply(
        &mut ledger,
        MemoryRole::Maps,
        call(7, 0, Some(1), Some(1), Some(0xdead)),
        Some(&a),
    );
    assert_eq!(ledger.entries, 0);
}

#[test]
fn an_out_of_memory_failure_reports_the_gpus_holdings_and_largest_allocations() {
    let (a, b) = (gpu("0000:3b:00.0"), gpu("0000:86:00.0"));
    let mut ledger = MemoryLedger::default();
    for (i, bytes) in [
        (1u64, 100u64),
        (2, 900),
        (3, 500),
        (4, 300),
        (5, 700),
        (6, 200),
        (7, 800),
        (8, 600),
        (9, 400),
    ] {
        apply(
            &mut ledger,
            DEVICE,
            call(7, 0, Some(bytes), Some(i << 12), None),
            Some(&a),
        );
    }
    apply(
        &mut ledger,
        DEVICE,
        call(7, 0, Some(1 << 30), Some(0xf000), None),
        Some(&b),
    );
    apply(
        &mut ledger,
        MemoryRole::CreatesPhysical,
        call(7, 0, Some(1000), Some(0xa), None),
        Some(&a),
    );
    // Not an OOM, or not an allocation: nothing.
    assert_eq!(
        apply(
            &mut ledger,
            DEVICE,
            call(7, 1, Some(1), None, None),
            Some(&a)
        ),
        None
    );
    assert_eq!(
        apply(
            &mut ledger,
            MemoryRole::Frees,
            call(7, 2, None, Some(1), None),
            Some(&a)
        ),
        None
    );
    let held = apply(
        &mut ledger,
        DEVICE,
        call(7, 2, Some(1 << 40), None, None),
        Some(&a),
    )
    .unwrap();
    assert_eq!(held.bytes, [4500, 0, 0, 0, 1000]);
    // cuInit was not seen: not from the start.
    assert!(!held.seen_from_start);
    let sizes: Vec<Option<u64>> = held.largest.iter().map(|l| l.bytes).collect();
    assert_eq!(sizes, [1000, 900, 800, 700, 600, 500, 400, 300].map(Some));
    assert_eq!(held.largest[0].kind, "physical");
    assert_eq!(held.largest[1].kind, "device");
    assert_eq!(held.largest[1].address, 2 << 12);
    assert_eq!(held.largest[1].function, "f3");
    // A physical allocation failing too; a process the ledger never saw holds nothing known.
    let held = apply(
        &mut ledger,
        MemoryRole::CreatesPhysical,
        call(7, 2, Some(1), None, None),
        Some(&b),
    )
    .unwrap();
    assert_eq!(held.bytes, [1 << 30, 0, 0, 0, 0]);
    let unknown = apply(&mut ledger, DEVICE, call(99, 2, Some(1), None, None), None).unwrap();
    assert_eq!(unknown, HeldMemory::default());
}

mod bounds;
