//! How the agent's heap serves its large blocks. glibc starts by giving every block of
//! 128 KiB or more a mapping of its own and raises that threshold to the size of each such
//! block freed (up to 32 MiB), moving the trim threshold (free room kept at the top of an arena)
//! to twice it. The agent fixes both at that end state from the start: the Parquet sink's
//! growing buffers (column pages, the 4 MiB file) are reused from the heap instead of being
//! mapped, faulted in and unmapped for every batch.
//!
//! Lower values were the default before and are not: a 256 KiB mmap threshold with a 128 KiB or
//! 2 MiB trim threshold kept the peak RSS of 2 threads x 1 M calls into Parquet about 6-10 MiB
//! lower (medians), but on a 16-CPU host some runs took 333,000-856,000 page faults and twice the
//! CPU per event (unmapping on many CPUs; 9,100-11,600 faults with these values), and on a 2-vCPU
//! VM cost 0.04 µs more per event in the same interleaved rounds (docs/performance.md, "Agent
//! memory").

/// Blocks of at least this many bytes get a mapping of their own, returned at `free`.
pub const MMAP_THRESHOLD_BYTES: i32 = 32 * 1024 * 1024;

/// Free memory at the top of an arena's heap is returned to the kernel beyond this many bytes.
pub const TRIM_THRESHOLD_BYTES: i32 = 64 * 1024 * 1024;

/// Which of the two glibc settings [`fix_large_block_thresholds`] set; one the environment names
/// (`MALLOC_MMAP_THRESHOLD_`, `MALLOC_TRIM_THRESHOLD_`, or `glibc.malloc.mmap_threshold` /
/// `glibc.malloc.trim_threshold` in `GLIBC_TUNABLES`, already applied by glibc) is left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeapSettings {
    pub mmap_threshold: bool,
    pub trim_threshold: bool,
}

/// Fixes glibc's mmap and trim thresholds at [`MMAP_THRESHOLD_BYTES`] and
/// [`TRIM_THRESHOLD_BYTES`], each unless the environment sets it. Call before threads start.
pub fn fix_large_block_thresholds() -> HeapSettings {
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
        let settings = fix_large_block_thresholds();
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
