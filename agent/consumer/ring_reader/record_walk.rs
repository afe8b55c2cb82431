//! Walks one ring's committed records in order and gives their space back to the kernel in steps
//! of [`RELEASE_STEP_BYTES`], over the ring's positions and data wherever they are mapped (the
//! kernel's pages, or a test's memory laid out the same way).
//!
//! The layout is the kernel's (`kernel/bpf/ringbuf.c`): each record has an 8-byte header whose
//! first word is its length with a busy bit (not committed yet) and a discard bit; records are
//! padded to 8 bytes; the data area is mapped twice in a row. The kernel wakes a waiting consumer
//! for a submit whose record sits at the consumer position; a position stored late could miss
//! that, so after its last store a pass reads the producer position again behind a full fence
//! and goes on if anything arrived (the agent's programs submit with `BPF_RB_FORCE_WAKEUP` or
//! `BPF_RB_NO_WAKEUP`, which that rule does not concern, but the walk does not rely on it). A
//! header whose length cannot be right (the kernel never writes one) ends the pass with an error
//! after giving back everything up to the producer position, so the ring goes on.

use std::sync::atomic::{fence, AtomicU32, AtomicUsize, Ordering};

use anyhow::bail;

/// Bytes consumed between two stores of the consumer position (at most an eighth of the ring).
const RELEASE_STEP_BYTES: usize = 16 * 1024;

/// The record header's busy bit: reserved, not submitted yet.
const BUSY_BIT: u32 = 1 << 31;
/// The record header's discard bit: submitted as discarded, skipped.
const DISCARD_BIT: u32 = 1 << 30;
/// Bytes of a record's header (length word and page offset).
const HEADER_BYTES: usize = 8;

/// A ring's positions and data, wherever they are mapped.
pub(super) struct RingView<'a> {
    consumer: &'a AtomicUsize,
    producer: &'a AtomicUsize,
    /// The data area, `2 * size` bytes: the ring and, right after it, the same bytes again.
    data: *const u8,
    size: usize,
    release_step: usize,
}

impl<'a> RingView<'a> {
    /// # Safety
    /// `data` must be readable for `2 * size` bytes while `'a` lasts, the second half showing
    /// the first, and `size` a power of two.
    pub(super) unsafe fn new(
        consumer: &'a AtomicUsize,
        producer: &'a AtomicUsize,
        data: *const u8,
        size: usize,
    ) -> Self {
        Self {
            consumer,
            producer,
            data,
            size,
            release_step: RELEASE_STEP_BYTES.min(size / 8).max(HEADER_BYTES),
        }
    }

    /// Hands every committed record to `callback` in order, up to the first one still busy,
    /// and returns how many it handed over.
    pub(super) fn consume(&self, callback: &mut dyn FnMut(&[u8])) -> anyhow::Result<u64> {
        let mut position = self.consumer.load(Ordering::Acquire);
        let mut released = position;
        let mut handed = 0;
        loop {
            let produced = self.producer.load(Ordering::Acquire);
            let mut busy = false;
            while position < produced {
                let header = self.data.wrapping_add(position & (self.size - 1));
                // SAFETY: the header lies within the first copy of the data and is 8-aligned
                // (records are padded to 8 bytes); the kernel writes its length word atomically.
                let word = unsafe { (*header.cast::<AtomicU32>()).load(Ordering::Acquire) };
                if word & BUSY_BIT != 0 {
                    busy = true;
                    break;
                }
                let len = (word & !(BUSY_BIT | DISCARD_BIT)) as usize;
                if len + HEADER_BYTES > self.size {
                    // Where the next record starts is lost with this header: give back
                    // everything up to the producer position, so that the ring goes on. What
                    // is skipped is neither received nor lost in the kernel, which the run's
                    // accounting reports as a mismatch.
                    self.release(produced, &mut released);
                    bail!(
                        "a ring record claims {len} bytes in a ring of {}: skipped {} bytes \
                         up to the producer position",
                        self.size,
                        produced - position
                    );
                }
                if word & DISCARD_BIT == 0 {
                    // SAFETY: the record's bytes follow its header within the doubled data
                    // area (len + header <= size), committed, and not reused by the kernel
                    // until the consumer position passes them.
                    let record =
                        unsafe { std::slice::from_raw_parts(header.add(HEADER_BYTES), len) };
                    callback(record);
                    handed += 1;
                }
                position += (len + HEADER_BYTES).next_multiple_of(HEADER_BYTES);
                if position - released >= self.release_step {
                    self.release(position, &mut released);
                }
            }
            self.release(position, &mut released);
            if busy {
                return Ok(handed);
            }
            // A submit that came after the last read of the producer position but saw the old
            // consumer position did not wake anyone: look once more.
            fence(Ordering::SeqCst);
            if self.producer.load(Ordering::Acquire) == position {
                return Ok(handed);
            }
        }
    }

    fn release(&self, position: usize, released: &mut usize) {
        if position != *released {
            self.consumer.store(position, Ordering::Release);
            *released = position;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ring in test memory: the positions and a data area of `2 * size` bytes whose second half
    /// mirrors the first, as the kernel's double mapping shows it.
    struct TestRing {
        consumer: AtomicUsize,
        producer: AtomicUsize,
        data: Vec<u64>,
        size: usize,
    }

    impl TestRing {
        fn new(size: usize, start: usize) -> Self {
            Self {
                consumer: AtomicUsize::new(start),
                producer: AtomicUsize::new(start),
                data: vec![0; 2 * size / 8],
                size,
            }
        }

        fn bytes(&mut self) -> &mut [u8] {
            let len = self.data.len() * 8;
            // SAFETY: the u64 buffer is `len` bytes of initialized memory, borrowed mutably.
            unsafe { std::slice::from_raw_parts_mut(self.data.as_mut_ptr().cast::<u8>(), len) }
        }

        /// Writes `payload` at the producer position with the header `flags`, in both copies, and
        /// moves the producer past it. Returns where it starts.
        fn push(&mut self, payload: &[u8], flags: u32) -> usize {
            let start = self.producer.load(Ordering::Relaxed);
            let word = payload.len() as u32 | flags;
            let mut record = word.to_le_bytes().to_vec();
            record.extend_from_slice(&[0; 4]);
            record.extend_from_slice(payload);
            let size = self.size;
            let bytes = self.bytes();
            for (offset, byte) in record.iter().enumerate() {
                let at = (start + offset) & (size - 1);
                bytes[at] = *byte;
                bytes[at + size] = *byte;
            }
            let end = start + (record.len()).next_multiple_of(HEADER_BYTES);
            self.producer.store(end, Ordering::Release);
            start
        }

        /// Clears the busy bit of the record at `position`.
        fn commit(&mut self, position: usize) {
            let size = self.size;
            let at = position & (size - 1);
            let bytes = self.bytes();
            bytes[at + 3] &= !0x80;
            bytes[at + size + 3] &= !0x80;
        }

        /// The walk over this ring.
        fn view(&self) -> RingView<'_> {
            // SAFETY: `data` holds 2 * size bytes, the second half mirroring the first.
            unsafe {
                RingView::new(
                    &self.consumer,
                    &self.producer,
                    self.data.as_ptr().cast(),
                    self.size,
                )
            }
        }

        /// Runs one pass, returning what the callback saw and the pass's result.
        fn consume(&self) -> (Vec<Vec<u8>>, anyhow::Result<u64>) {
            let mut seen = Vec::new();
            let result = self
                .view()
                .consume(&mut |record: &[u8]| seen.push(record.to_vec()));
            (seen, result)
        }
    }

    #[test]
    fn hands_over_committed_records_in_order_and_skips_discarded_ones() {
        let mut ring = TestRing::new(4096, 0);
        ring.push(b"first", 0);
        ring.push(b"thrown away", DISCARD_BIT);
        ring.push(b"third record", 0);
        let (seen, result) = ring.consume();
        assert_eq!(result.unwrap(), 2);
        assert_eq!(seen, vec![b"first".to_vec(), b"third record".to_vec()]);
        // 8 + 5 -> 16, 8 + 11 -> 24, 8 + 12 -> 24.
        assert_eq!(ring.consumer.load(Ordering::Relaxed), 64);
        assert_eq!(ring.producer.load(Ordering::Relaxed), 64);
        let (seen, result) = ring.consume();
        assert_eq!((seen.len(), result.unwrap()), (0, 0));
    }

    #[test]
    fn stops_at_a_busy_record_and_takes_it_once_committed() {
        let mut ring = TestRing::new(4096, 0);
        ring.push(b"a", 0);
        let busy = ring.push(b"b", BUSY_BIT);
        ring.push(b"c", 0);
        let (seen, result) = ring.consume();
        assert_eq!(result.unwrap(), 1);
        assert_eq!(seen, vec![b"a".to_vec()]);
        assert_eq!(ring.consumer.load(Ordering::Relaxed), busy);
        ring.commit(busy);
        let (seen, result) = ring.consume();
        assert_eq!(result.unwrap(), 2);
        assert_eq!(seen, vec![b"b".to_vec(), b"c".to_vec()]);
        assert_eq!(ring.consumer.load(Ordering::Relaxed), 48);
    }

    #[test]
    fn a_record_that_wraps_past_the_end_reads_as_one_slice_far_into_the_positions() {
        // Positions only grow: start a lap count past 32 bits, 16 bytes before the end.
        let start = (1usize << 40) - 16;
        let mut ring = TestRing::new(4096, start);
        let payload: Vec<u8> = (0..40).collect();
        ring.push(&payload, 0);
        ring.push(b"after", 0);
        let (seen, result) = ring.consume();
        assert_eq!(result.unwrap(), 2);
        assert_eq!(seen, vec![payload, b"after".to_vec()]);
        assert_eq!(ring.consumer.load(Ordering::Relaxed), start + 48 + 16);
    }

    #[test]
    fn gives_the_space_back_in_steps_and_all_of_it_at_the_end() {
        // 8 KiB ring: a step of 1 KiB (an eighth); records of 64 bytes with the header.
        let mut ring = TestRing::new(8192, 0);
        for i in 0..100u8 {
            ring.push(&[i; 56], 0);
        }
        let mut released_at_each_record = Vec::new();
        let handed = ring
            .view()
            .consume(&mut |_: &[u8]| {
                released_at_each_record.push(ring.consumer.load(Ordering::Relaxed))
            })
            .unwrap();
        assert_eq!(handed, 100);
        let expected: Vec<usize> = (0..100).map(|i| i / 16 * 1024).collect();
        assert_eq!(released_at_each_record, expected);
        assert_eq!(ring.consumer.load(Ordering::Relaxed), 6400);
    }

    #[test]
    fn a_length_past_the_ring_is_an_error_that_skips_to_the_producer_and_the_ring_goes_on() {
        let mut ring = TestRing::new(4096, 0);
        ring.push(b"good", 0);
        let bad = ring.producer.load(Ordering::Relaxed);
        // A header claiming the whole ring; the bytes after it are not there.
        let bytes = ring.bytes();
        bytes[bad..bad + 4].copy_from_slice(&4096u32.to_le_bytes());
        ring.producer.store(bad + 8, Ordering::Release);
        let (seen, result) = ring.consume();
        assert_eq!(seen, vec![b"good".to_vec()]);
        let error = result.unwrap_err().to_string();
        assert_eq!(
            error,
            "a ring record claims 4096 bytes in a ring of 4096: skipped 8 bytes up to the producer \
             position"
        );
        assert_eq!(ring.consumer.load(Ordering::Relaxed), bad + 8);
        // The ring goes on with the next record.
        ring.push(b"after", 0);
        let (seen, result) = ring.consume();
        assert_eq!(seen, vec![b"after".to_vec()]);
        assert_eq!(result.unwrap(), 1);
    }
}
