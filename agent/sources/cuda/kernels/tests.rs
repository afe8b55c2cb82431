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

#[test]
fn kernels_and_their_functions_are_named_per_process() {
    let mut names = KernelNames::new();
    assert!(names.learned(10, 0x6b00_0000, 0x4d00, name("_Z10wild_writePi")));
    assert!(names.function_of(10, 0x6b00_0001, 0x6b00_0000));
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
    assert!(!names.function_of(10, 0x77, 0x76));
    assert_eq!(names.lookup(10, 0x77), Lookup::Unknown);
    // The name is counted once for both handles.
    assert_eq!(
        names.name_bytes(),
        "_Z10wild_writePi".len() + "wild_write(int*)".len()
    );
    assert_eq!(names.len(), 2);
}

#[test]
fn an_unload_forgets_the_library_s_kernels_and_their_functions_only() {
    let mut names = KernelNames::new();
    names.learned(10, 0x100, 0x4d00, name("_Z1av"));
    names.function_of(10, 0x101, 0x100);
    names.learned(10, 0x200, 0x4d01, name("_Z1bv"));
    // The same library handle in another process is not this one.
    names.learned(11, 0x100, 0x4d00, name("_Z1cv"));
    assert_eq!(names.unloaded(10, 0x4d00), 2);
    assert_eq!(names.lookup(10, 0x100), Lookup::Unknown);
    assert_eq!(names.lookup(10, 0x101), Lookup::Unknown);
    assert_eq!(named(names.lookup(10, 0x200)).as_deref(), Some("_Z1bv"));
    assert_eq!(named(names.lookup(11, 0x100)).as_deref(), Some("_Z1cv"));
    // The handle value comes back for another kernel.
    names.learned(10, 0x100, 0x4d02, name("_Z6reusedv"));
    assert_eq!(
        named(names.lookup(10, 0x100)).as_deref(),
        Some("_Z6reusedv")
    );
    assert_eq!(
        names.name_bytes(),
        ["_Z1bv", "b()", "_Z1cv", "c()", "_Z6reusedv", "reused()"]
            .iter()
            .map(|s| s.len())
            .sum::<usize>()
    );
    assert_eq!(names.unloaded(12, 0x4d00), 0);
}

#[test]
fn a_handle_learned_again_takes_the_new_name() {
    let mut names = KernelNames::new();
    names.learned(1, u64::MAX, 0, name("first"));
    names.learned(1, u64::MAX, 0, name("second"));
    assert_eq!(named(names.lookup(1, u64::MAX)).as_deref(), Some("second"));
    assert_eq!(names.name_bytes(), 2 * "second".len());
    assert_eq!(names.len(), 1);
}

#[test]
fn names_beyond_the_bound_are_dropped_and_counted() {
    let mut names = KernelNames::new();
    let big = "k".repeat(MAX_NAME_BYTES_TOTAL / 2 - 1);
    assert!(names.learned(1, 1, 0, name(&big)));
    assert!(!names.learned(1, 2, 0, name(&big)));
    assert_eq!(names.dropped(), 1);
    assert_eq!(names.lookup(1, 2), Lookup::Unknown);
    // Freed room is usable again.
    assert_eq!(names.unloaded(1, 0), 1);
    assert_eq!(names.name_bytes(), 0);
    assert!(names.learned(1, 2, 0, name(&big)));
}

#[test]
fn exited_processes_are_forgotten() {
    let proc_dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(proc_dir.path().join("10")).unwrap();
    let mut names = KernelNames::new();
    names.learned(10, 1, 0, name("_Z1av"));
    names.learned(11, 1, 0, name("_Z1bv"));
    names.function_of(11, 2, 1);
    names.forget_exited(proc_dir.path());
    assert_eq!(names.len(), 1);
    assert_eq!(names.lookup(11, 2), Lookup::Unknown);
    assert_eq!(names.name_bytes(), "_Z1av".len() + "a()".len());
}
