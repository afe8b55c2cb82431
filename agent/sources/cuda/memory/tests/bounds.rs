//! The ledger's bounds and lifetimes: pointers handed out again, processes that exit, the
//! GPUs one process is followed on.

use super::*;

#[test]
fn a_pointer_handed_out_again_replaces_its_unseen_free_and_exits_are_forgotten() {
    let mut ledger = MemoryLedger::default();
    apply(
        &mut ledger,
        DEVICE,
        call(7, 0, Some(100), Some(0x1000), None),
        None,
    );
    apply(
        &mut ledger,
        DEVICE,
        call(7, 0, Some(300), Some(0x1000), None),
        None,
    );
    assert_eq!(ledger.holders()[0].held.bytes[0], 300);
    assert_eq!(ledger.holders()[0].held.allocations, 1);
    let proc_dir = tempfile::tempdir().unwrap();
    ledger.forget_exited(proc_dir.path());
    assert_eq!(ledger.holders(), []);
    assert_eq!(ledger.entries, 0);
}

#[test]
fn a_process_is_followed_on_at_most_64_gpus_and_an_emptied_gpu_starts_from_zero() {
    let mut ledger = MemoryLedger::default();
    let gpus: Vec<_> = (0..=64)
        .map(|i| gpu(&format!("0000:{i:02x}:00.0")))
        .collect();
    apply(
        &mut ledger,
        MemoryRole::Initializes,
        call(7, 0, None, None, None),
        None,
    );
    for (i, on) in gpus.iter().enumerate() {
        let row = call(7, 0, Some(10 + i as u64), Some(0x10_000 + i as u64), None);
        apply(&mut ledger, DEVICE, row, Some(on));
    }
    // The 65th GPU's allocation is not followed, and says so.
    let holders = ledger.holders();
    assert_eq!(holders.len(), 64);
    assert_eq!(
        holders.iter().map(|h| h.held.bytes[0]).sum::<u64>(),
        (10..74u64).sum::<u64>()
    );
    assert_eq!(ledger.untracked(), 1);
    assert!(holders.iter().all(|h| !h.complete));
    // Sums that saturated leave nothing once every allocation is freed.
    let managed = MemoryRole::Allocates(MemoryKind::Managed);
    for pointer in [0x1, 0x2] {
        let row = call(7, 0, Some(u64::MAX), Some(pointer), None);
        apply(&mut ledger, managed, row, Some(&gpus[0]));
    }
    for pointer in [0x1, 0x2, 0x10_000] {
        let row = call(7, 0, None, Some(pointer), None);
        apply(&mut ledger, MemoryRole::Frees, row, Some(&gpus[0]));
    }
    assert_eq!(ledger.holders().len(), 63);
    let row = call(7, 0, Some(5), Some(0x3), None);
    apply(&mut ledger, managed, row, Some(&gpus[0]));
    let first = ledger
        .holders()
        .into_iter()
        .find(|h| h.gpu.as_ref() == Some(&gpus[0]));
    assert_eq!(
        first.map(|h| (h.held.bytes, h.held.allocations)),
        Some(([0, 5, 0, 0, 0], 1))
    );
    // The 65th GPU is still not followed: the process keeps the places of its 64.
    let row = call(7, 0, Some(1), Some(0x4), None);
    apply(&mut ledger, DEVICE, row, Some(&gpus[64]));
    assert_eq!(ledger.untracked(), 2);
}
