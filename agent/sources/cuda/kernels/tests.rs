use super::*;

fn name(mangled: &str) -> Arc<KernelName> {
    Arc::new(KernelName::new(mangled))
}

fn named(lookup: Lookup<'_>) -> Option<String> {
    match lookup {
        Lookup::Named(name) => Some(name.mangled.to_string()),
        Lookup::Unknown => None,
    }
}

fn at(names: &KernelNames, pid: i32, handle: u64, time_ns: i64) -> Option<String> {
    names
        .get_at(pid, handle, time_ns)
        .map(|n| n.mangled.to_string())
}

#[test]
fn kernels_and_their_functions_are_named_per_process() {
    let mut names = KernelNames::new();
    assert!(names.learned(10, 0x6b00_0000, 0x4d00, name("_Z10wild_writePi"), 1));
    assert!(names.function_of(10, 0x6b00_0001, 0x6b00_0000, 2));
    // Asked again: the same answer.
    assert!(names.function_of(10, 0x6b00_0001, 0x6b00_0000, 3));
    assert_eq!(
        named(names.lookup(10, 0x6b00_0001)).as_deref(),
        Some("_Z10wild_writePi")
    );
    assert_eq!(
        named(names.lookup(10, 0x6b00_0000)).as_deref(),
        Some("_Z10wild_writePi")
    );
    // Another process's handle of the same value is its own.
    assert_eq!(names.lookup(11, 0x6b00_0000), Lookup::Unknown);
    // A function of a kernel never announced stays unknown.
    assert!(!names.function_of(10, 0x77, 0x76, 4));
    assert_eq!(names.lookup(10, 0x77), Lookup::Unknown);
    // Each handle is charged its name, shared or not.
    assert_eq!(
        names.name_bytes(),
        2 * ("_Z10wild_writePi".len() + "wild_write(int*)".len())
    );
    assert_eq!(names.len(), 2);
    assert_eq!(names.pids(), [10]);
}

#[test]
fn an_unload_retires_the_library_s_kernels_and_their_functions_only() {
    let mut names = KernelNames::new();
    names.learned(10, 0x100, 0x4d00, name("_Z1av"), 1);
    names.function_of(10, 0x101, 0x100, 2);
    names.learned(10, 0x200, 0x4d01, name("_Z1bv"), 3);
    // The same library handle in another process is not this one.
    names.learned(11, 0x100, 0x4d00, name("_Z1cv"), 4);
    assert_eq!(names.unloaded(10, 0x4d00, 10), 2);
    assert_eq!(names.lookup(10, 0x100), Lookup::Unknown);
    assert_eq!(names.lookup(10, 0x101), Lookup::Unknown);
    assert_eq!(named(names.lookup(10, 0x200)).as_deref(), Some("_Z1bv"));
    assert_eq!(named(names.lookup(11, 0x100)).as_deref(), Some("_Z1cv"));
    // The handle value comes back for another kernel.
    names.learned(10, 0x100, 0x4d02, name("_Z6reusedv"), 20);
    assert_eq!(
        named(names.lookup(10, 0x100)).as_deref(),
        Some("_Z6reusedv")
    );
    // A launch decoded after the fact gets the name its handle had when it ran.
    assert_eq!(at(&names, 10, 0x100, 5).as_deref(), Some("_Z1av"));
    assert_eq!(at(&names, 10, 0x101, 9).as_deref(), Some("_Z1av"));
    assert_eq!(at(&names, 10, 0x100, 15), None);
    assert_eq!(at(&names, 10, 0x100, 20).as_deref(), Some("_Z6reusedv"));
    assert_eq!(at(&names, 10, 0x100, 0), None);
    assert_eq!(at(&names, 10, 0x101, i64::MAX), None);
    assert_eq!(names.unloaded(12, 0x4d00, 30), 0);
}

#[test]
fn a_handle_learned_again_takes_the_new_name() {
    let mut names = KernelNames::new();
    names.learned(1, u64::MAX, 0, name("first"), i64::MIN);
    names.learned(1, u64::MAX, 0, name("second"), 0);
    assert_eq!(named(names.lookup(1, u64::MAX)).as_deref(), Some("second"));
    assert_eq!(at(&names, 1, u64::MAX, -1).as_deref(), Some("first"));
    assert_eq!(names.len(), 1);
    // Looked up again with the same answer: nothing retired, nothing charged again.
    let before = names.name_bytes();
    names.learned(1, u64::MAX, 0, name("second"), 5);
    assert_eq!((names.name_bytes(), names.retired.len()), (before, 1));
    assert_eq!(at(&names, 1, u64::MAX, 1).as_deref(), Some("second"));
}

#[test]
fn names_beyond_the_bound_are_dropped_and_counted() {
    let mut names = KernelNames::new();
    let big = "k".repeat(MAX_NAME_BYTES_TOTAL / 2 - 1);
    assert!(names.learned(1, 1, 0, name(&big), 0));
    assert!(!names.learned(1, 2, 0, name(&big), 0));
    assert_eq!(names.dropped(), 1);
    assert_eq!(names.lookup(1, 2), Lookup::Unknown);
    // Retired names still count until they age out or their process goes.
    assert_eq!(names.unloaded(1, 0, 1), 1);
    assert!(!names.learned(1, 2, 0, name(&big), 2));
    names.forget_process(1);
    assert_eq!(names.name_bytes(), 0);
    assert!(names.learned(1, 2, 0, name(&big), 3));
    // A handle that names another kernel now, beyond the bound: its old name is retired, not
    // left current.
    assert!(!names.learned(1, 2, 0, name(&format!("{big}y")), 4));
    assert_eq!(names.lookup(1, 2), Lookup::Unknown);
    assert_eq!(at(&names, 1, 2, 3).map(|n| n.len()), Some(big.len()));
}

#[test]
fn the_bound_holds_however_many_hold_a_name() {
    // The source keeps its own reference to a name while the table learns it: the charge must
    // not depend on who else holds the name.
    let mut names = KernelNames::new();
    let big = name(&"k".repeat(MAX_NAME_BYTES_TOTAL / 4));
    let held: Vec<Arc<KernelName>> = (0..8).map(|_| Arc::clone(&big)).collect();
    let learned = (0..8u64)
        .filter(|&h| names.learned(1, h, 0, Arc::clone(&big), 0))
        .count();
    assert_eq!(learned, 2);
    assert!(names.name_bytes() <= MAX_NAME_BYTES_TOTAL);
    assert_eq!(names.dropped(), 6);
    drop(held);
}

#[test]
fn retired_handles_are_bounded() {
    let mut names = KernelNames::new();
    for i in 0..(MAX_RETIRED as u64 + 5) {
        names.learned(1, i, 7, name("_Z1kv"), i as i64);
        names.unloaded(1, 7, i as i64 + 1);
    }
    assert_eq!(names.retired.len(), MAX_RETIRED);
    assert_eq!(at(&names, 1, 0, 0), None);
    assert_eq!(at(&names, 1, 10, 10).as_deref(), Some("_Z1kv"));
    assert_eq!(
        names.name_bytes(),
        MAX_RETIRED * ("_Z1kv".len() + "k()".len())
    );
}

#[test]
fn a_process_is_forgotten_whole() {
    let mut names = KernelNames::new();
    names.learned(10, 1, 0, name("_Z1av"), 0);
    names.learned(11, 1, 0, name("_Z1bv"), 0);
    names.function_of(11, 2, 1, 0);
    names.unloaded(11, 0, 5);
    names.forget_process(11);
    assert_eq!(names.len(), 1);
    assert_eq!(at(&names, 11, 2, 1), None);
    assert_eq!(names.name_bytes(), "_Z1av".len() + "a()".len());
    assert!(names.retired.is_empty());
}
