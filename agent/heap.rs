//! How the agent's heap gives memory back. glibc serves allocations from 128 KiB up with their
//! own mappings, but raises that threshold to the size of every such block freed (up to
//! 32 MiB): after the first Parquet file, its growing buffers (up to the 4 MiB file, the
//! column writers' pages) live in the arenas of the threads that built them and are kept
//! there when freed. A fixed mmap threshold keeps them in mappings that go back to the kernel
//! at `free`: the load harness's peak RSS for 2 threads x 1 M calls into Parquet went from
//! 67-73 MiB to 60-64 MiB.
//!
//! Fixing the mmap threshold also stops glibc's moving of the trim threshold, which then stays
//! at 128 KiB: each time the top of an arena's heap had that much free it went back to the
//! kernel, and the next batch faulted it in again (about 90,000 page faults in that run, a
//! sixth of the agent's CPU on a 2-vCPU VM). A trim threshold of [`TRIM_THRESHOLD_BYTES`]
//! keeps that much at the top of each arena: about 44,000 faults and 0.15 µs less CPU per event
//! there at the same peak RSS; on a 16-CPU host half the faults, no CPU difference beyond the
//! noise and about 2 MiB more (docs/performance.md, "Agent memory").

/// Blocks of at least this many bytes get a mapping of their own, returned at `free`.
pub const MMAP_THRESHOLD_BYTES: i32 = 256 * 1024;

/// Free memory at the top of an arena's heap is returned to the kernel beyond this many bytes.
pub const TRIM_THRESHOLD_BYTES: i32 = 2 * 1024 * 1024;

/// Which of the two glibc settings [`bound_retained_memory`] set; one the environment names
/// (`MALLOC_MMAP_THRESHOLD_`, `MALLOC_TRIM_THRESHOLD_`, or `glibc.malloc.mmap_threshold` /
/// `glibc.malloc.trim_threshold` in `GLIBC_TUNABLES`, already applied by glibc) is left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeapSettings {
    pub mmap_threshold: bool,
    pub trim_threshold: bool,
}

/// Fixes glibc's mmap and trim thresholds at [`MMAP_THRESHOLD_BYTES`] and
/// [`TRIM_THRESHOLD_BYTES`], each unless the environment sets it. Call before threads start.
pub fn bound_retained_memory() -> HeapSettings {
    let tunables = std::env::var("GLIBC_TUNABLES").unwrap_or_default();
    let set = |variable: &str, tunable: &str, parameter: i32, value: i32| {
        let named = std::env::var_os(variable).is_some() || names_tunable(&tunables, tunable);
        // SAFETY: mallopt only changes an allocator parameter; it takes the allocator's lock.
        !named && unsafe { libc::mallopt(parameter, value) == 1 }
    };
    HeapSettings {
        mmap_threshold: set(
            "MALLOC_MMAP_THRESHOLD_",
            "glibc.malloc.mmap_threshold",
            libc::M_MMAP_THRESHOLD,
            MMAP_THRESHOLD_BYTES,
        ),
        trim_threshold: set(
            "MALLOC_TRIM_THRESHOLD_",
            "glibc.malloc.trim_threshold",
            libc::M_TRIM_THRESHOLD,
            TRIM_THRESHOLD_BYTES,
        ),
    }
}

/// Whether `GLIBC_TUNABLES` (`name=value:name=value`) sets `tunable`.
fn names_tunable(tunables: &str, tunable: &str) -> bool {
    tunables.split(':').any(|setting| {
        setting
            .split_once('=')
            .is_some_and(|(name, _)| name == tunable)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glibc_takes_both_thresholds_the_environment_does_not_set() {
        // The test binary runs without these variables unless someone sets them.
        let tunables = std::env::var("GLIBC_TUNABLES").unwrap_or_default();
        let settings = bound_retained_memory();
        assert_eq!(
            settings,
            HeapSettings {
                mmap_threshold: std::env::var_os("MALLOC_MMAP_THRESHOLD_").is_none()
                    && !names_tunable(&tunables, "glibc.malloc.mmap_threshold"),
                trim_threshold: std::env::var_os("MALLOC_TRIM_THRESHOLD_").is_none()
                    && !names_tunable(&tunables, "glibc.malloc.trim_threshold"),
            }
        );
    }

    #[test]
    fn a_tunable_counts_only_under_its_exact_name() {
        let tunables = "glibc.malloc.arena_max=2:glibc.malloc.trim_threshold=4194304";
        assert!(names_tunable(tunables, "glibc.malloc.trim_threshold"));
        assert!(!names_tunable(tunables, "glibc.malloc.mmap_threshold"));
        assert!(!names_tunable(tunables, "glibc.malloc.arena"));
        assert!(!names_tunable(
            "glibc.malloc.mmap_threshold",
            "glibc.malloc.mmap_threshold"
        ));
        assert!(!names_tunable("", "glibc.malloc.trim_threshold"));
    }
}
