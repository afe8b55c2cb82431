//! The record walk over a ring laid out in plain memory as the kernel lays out its pages.

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

    /// Runs one pass, returning what the callback saw and the pass's result.
    fn consume(&self) -> (Vec<Vec<u8>>, anyhow::Result<u64>) {
        let mut seen = Vec::new();
        // SAFETY: `data` holds 2 * size bytes, the second half mirroring the first.
        let view = unsafe {
            RingView::new(
                &self.consumer,
                &self.producer,
                self.data.as_ptr().cast(),
                self.size,
            )
        };
        let result = view.consume(&mut |record: &[u8]| seen.push(record.to_vec()));
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
    // SAFETY: as in `TestRing::consume`.
    let view = unsafe {
        RingView::new(
            &ring.consumer,
            &ring.producer,
            ring.data.as_ptr().cast(),
            ring.size,
        )
    };
    let handed = view
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

#[test]
fn a_failing_ring_does_not_keep_the_others_from_being_read() {
    let mut rings = vec![1, 2, 3, 4];
    let mut visited = Vec::new();
    let result = each_then_first_error(&mut rings, |ring| {
        visited.push(*ring);
        match *ring {
            2 | 3 => anyhow::bail!("ring {ring} failed"),
            _ => Ok(()),
        }
    });
    assert_eq!(visited, vec![1, 2, 3, 4]);
    assert_eq!(result.unwrap_err().to_string(), "ring 2 failed");
}
