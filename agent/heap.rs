//! How the agent's heap gives memory back. glibc serves allocations from 128 KiB up with their
//! own mappings, but raises that threshold to the size of every such block freed (up to
//! 32 MiB): after the first Parquet file, its growing buffers (up to the 4 MiB file, the
//! column writers' pages) live in the arenas of the threads that built them and are kept
//! there when freed. A fixed threshold keeps them in mappings that go back to the kernel at
//! `free`: the load harness's peak RSS for 2 threads x 1 M calls into Parquet went from
//! 67-73 MiB to 60-64 MiB, for 0.03 us more CPU per event (page faults on fresh mappings;
//! docs/performance.md, "Agent memory").

/// Blocks of at least this many bytes get a mapping of their own, returned at `free`.
pub const MMAP_THRESHOLD_BYTES: i32 = 256 * 1024;

/// Fixes glibc's mmap threshold at [`MMAP_THRESHOLD_BYTES`], unless the environment sets one
/// (`MALLOC_MMAP_THRESHOLD_`, which glibc has already applied). Call before threads start.
/// Returns whether it set it.
pub fn bound_retained_memory() -> bool {
    if std::env::var_os("MALLOC_MMAP_THRESHOLD_").is_some() {
        return false;
    }
    // SAFETY: mallopt only changes an allocator parameter; it takes the allocator's lock.
    unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) == 1 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glibc_takes_the_threshold() {
        // The test binary runs without MALLOC_MMAP_THRESHOLD_ unless someone sets it.
        if std::env::var_os("MALLOC_MMAP_THRESHOLD_").is_none() {
            assert!(bound_retained_memory());
        } else {
            assert!(!bound_retained_memory());
        }
    }
}
