//! Asks the CPU for the records that follow the one being handled, so that their cache lines
//! travel from the CPU that wrote them while this one decodes.
//!
//! A BPF ring record is written on the traced thread's CPU and read here; its cache lines are
//! still in that CPU's cache, and the first read of each waits for the transfer (on the 16-CPU
//! H200 host, about a sixth of the consumer's samples sat on the first access to a record).
//! Records lie one after the other in the ring's data area, each behind an 8-byte header and
//! padded to 8 bytes, so the next ones start right after the current record's end. A prefetch
//! never faults and changes no data: an address past what the producer has written, or past the
//! mapping, costs one wasted hint.

/// Bytes past the end of a record to ask for: about two CUDA records (136 bytes each with the
/// header), four cache lines.
const AHEAD_BYTES: usize = 256;

/// Bytes in a cache line on the CPUs the agent runs on.
const LINE_BYTES: usize = 64;

/// Hints the CPU to bring the [`AHEAD_BYTES`] that follow `record` (a record of a BPF ring,
/// borrowed from its mapping) into its cache.
#[inline(always)]
pub(super) fn records_after(record: &[u8]) {
    let end = record.as_ptr().wrapping_add(record.len());
    for offset in (0..AHEAD_BYTES).step_by(LINE_BYTES) {
        hint(end.wrapping_add(offset));
    }
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn hint(address: *const u8) {
    use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
    // SAFETY: PREFETCHT0 only hints the cache; it does not read the address for the program,
    // never faults, and is valid for any address, mapped or not.
    unsafe { _mm_prefetch::<_MM_HINT_T0>(address.cast::<i8>()) };
}

/// Other architectures (not built or tested here) go without the hint.
#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
fn hint(_address: *const u8) {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hints_at_the_end_of_a_buffer_and_past_any_mapping_do_not_fault() {
        let record = vec![7u8; 136];
        records_after(&record);
        records_after(&record[136..]);
        // An empty slice points at address 1: the hints land on the unmapped first page.
        records_after(&[]);
        assert_eq!(record, vec![7u8; 136]);
    }
}
