//! Reads the BPF ring buffers: maps each ring, walks its committed records in order, hands each
//! to the ring's callback and gives the space back to the kernel in steps of
//! [`RELEASE_STEP_BYTES`], not after every record.
//!
//! Why not libbpf's `ring_buffer`: it stores the consumer position after every record, and the
//! BPF programs read that position on every reserve and every `bpf_ringbuf_query`. While traced
//! threads on other CPUs produce, each of those stores has to take the position's cache line
//! back from them, and the consumer's next locked instruction waits for it. On the 16-CPU H200
//! host the ring callback's samples fell from 483 to 283 of a run with the position stored every
//! 16 KiB instead (docs/performance.md).
//!
//! The layout is the kernel's (`kernel/bpf/ringbuf.c`), mapped as libbpf maps it: a writable
//! consumer page, then a read-only producer page followed by the data pages mapped twice, so that
//! a record that wraps past the end reads as one slice. Each record has an 8-byte header whose
//! first word is its length with a busy bit (not committed yet) and a discard bit; records are
//! padded to 8 bytes. The kernel wakes a waiting consumer for a submit whose record sits at the
//! consumer position; a position stored late could miss that, so after its last store a pass
//! reads the producer position again behind a full fence and goes on if anything arrived (the
//! agent's programs submit with `BPF_RB_FORCE_WAKEUP` or `BPF_RB_NO_WAKEUP`, which that rule does
//! not concern, but the reader does not rely on it). A header whose length cannot be right (the
//! kernel never writes one) ends the pass with an error after giving back everything up to the
//! producer position; the ring, and every other ring, goes on.

use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{fence, AtomicU32, AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::{bail, Context};
use libbpf_rs::MapCore;

/// Bytes consumed between two stores of the consumer position (at most an eighth of the ring).
const RELEASE_STEP_BYTES: usize = 16 * 1024;

/// The record header's busy bit: reserved, not submitted yet.
const BUSY_BIT: u32 = 1 << 31;
/// The record header's discard bit: submitted as discarded, skipped.
const DISCARD_BIT: u32 = 1 << 30;
/// Bytes of a record's header (length word and page offset).
const HEADER_BYTES: usize = 8;

/// What a ring's records are handed to.
pub type RecordCallback<'cb> = Box<dyn FnMut(&[u8]) + 'cb>;

/// Collects the rings to read and their callbacks.
#[derive(Default)]
pub struct RingReaderBuilder<'cb> {
    rings: Vec<(OwnedFd, usize, RecordCallback<'cb>)>,
}

impl<'cb> RingReaderBuilder<'cb> {
    /// Adds the ring buffer `map`, whose records go to `callback`.
    pub fn add(
        &mut self,
        map: &dyn MapCore,
        callback: impl FnMut(&[u8]) + 'cb,
    ) -> anyhow::Result<&mut Self> {
        let fd = map
            .as_fd()
            .try_clone_to_owned()
            .context("duplicating a ring buffer's descriptor")?;
        let size = map.max_entries() as usize;
        self.rings.push((fd, size, Box::new(callback)));
        Ok(self)
    }

    /// Maps every ring and registers it for readiness.
    pub fn build(self) -> anyhow::Result<RingReader<'cb>> {
        // SAFETY: epoll_create1 takes a flag and returns a new descriptor or -1.
        let epoll = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if epoll < 0 {
            return Err(std::io::Error::last_os_error()).context("creating the rings' epoll");
        }
        // SAFETY: `epoll` is a descriptor just returned to us, owned by nothing else.
        let epoll = unsafe { OwnedFd::from_raw_fd(epoll) };
        let mut rings = Vec::with_capacity(self.rings.len());
        for (index, (fd, size, callback)) in self.rings.into_iter().enumerate() {
            let mapped = MappedRing::map(fd, size)?;
            let mut event = libc::epoll_event {
                events: libc::EPOLLIN as u32,
                u64: index as u64,
            };
            // SAFETY: both descriptors are open; `event` lives across the call.
            let rc = unsafe {
                libc::epoll_ctl(
                    epoll.as_raw_fd(),
                    libc::EPOLL_CTL_ADD,
                    mapped.fd.as_raw_fd(),
                    &mut event,
                )
            };
            if rc < 0 {
                return Err(std::io::Error::last_os_error()).context("registering a ring");
            }
            rings.push((mapped, callback));
        }
        Ok(RingReader { epoll, rings })
    }
}

/// Every ring the consumer reads, with its callback.
pub struct RingReader<'cb> {
    epoll: OwnedFd,
    rings: Vec<(MappedRing, RecordCallback<'cb>)>,
}

impl RingReader<'_> {
    /// Waits up to `timeout` for a ring to have records (or a forced wakeup), then takes every
    /// record of every ring.
    pub fn poll(&mut self, timeout: Duration) -> anyhow::Result<()> {
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; 8];
        let timeout_ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
        // SAFETY: `events` holds `events.len()` entries for the kernel to fill.
        let rc = unsafe {
            libc::epoll_wait(
                self.epoll.as_raw_fd(),
                events.as_mut_ptr(),
                events.len() as i32,
                timeout_ms,
            )
        };
        if rc < 0 {
            let err = std::io::Error::last_os_error();
            if err.kind() != std::io::ErrorKind::Interrupted {
                return Err(err).context("waiting for the rings");
            }
        }
        self.consume()
    }

    /// Takes every committed record of every ring, without waiting. A ring that fails does not
    /// keep the others from being read; the first failure is returned.
    pub fn consume(&mut self) -> anyhow::Result<()> {
        each_then_first_error(&mut self.rings, |(ring, callback)| {
            ring.view().consume(callback.as_mut()).map(drop)
        })
    }
}

/// Runs `step` on every item, returning the first error once all have run.
fn each_then_first_error<T>(
    items: &mut [T],
    mut step: impl FnMut(&mut T) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let mut first = Ok(());
    for item in items {
        let result = step(item);
        if first.is_ok() {
            first = result;
        }
    }
    first
}

/// One ring's two mappings.
struct MappedRing {
    fd: OwnedFd,
    consumer: Mapping,
    producer: Mapping,
    page: usize,
    size: usize,
}

impl MappedRing {
    fn map(fd: OwnedFd, size: usize) -> anyhow::Result<Self> {
        // SAFETY: sysconf has no preconditions.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
            .context("reading the page size")?;
        if !size.is_power_of_two() || !size.is_multiple_of(page) {
            bail!("a ring buffer of {size} bytes is not a power of two of whole pages");
        }
        let consumer = Mapping::new(&fd, page, libc::PROT_READ | libc::PROT_WRITE, 0)
            .context("mapping a ring's consumer page")?;
        let producer_len = size
            .checked_mul(2)
            .and_then(|data| data.checked_add(page))
            .context("a ring buffer too large to map")?;
        let producer = Mapping::new(&fd, producer_len, libc::PROT_READ, page as libc::off_t)
            .context("mapping a ring's producer page and data")?;
        Ok(Self {
            fd,
            consumer,
            producer,
            page,
            size,
        })
    }

    fn view(&self) -> RingView<'_> {
        let data = self.producer.address.wrapping_add(self.page);
        // SAFETY: each position is the first word of its page, aligned and mapped while `self`
        // lives; the kernel writes them only atomically. The data pages follow the producer
        // page, mapped twice (2 * size bytes).
        unsafe {
            RingView::new(
                &*self.consumer.address.cast::<AtomicUsize>(),
                &*self.producer.address.cast::<AtomicUsize>(),
                data,
                self.size,
            )
        }
    }
}

/// A shared mapping of a ring's file, unmapped when dropped.
struct Mapping {
    address: *mut u8,
    len: usize,
}

impl Mapping {
    fn new(
        fd: &OwnedFd,
        len: usize,
        protection: i32,
        offset: libc::off_t,
    ) -> std::io::Result<Self> {
        // SAFETY: a fresh shared mapping of `len` bytes of an open descriptor; nothing else
        // refers to the address range the kernel picks.
        let address = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                protection,
                libc::MAP_SHARED,
                fd.as_fd().as_raw_fd(),
                offset,
            )
        };
        if address == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Self {
            address: address.cast(),
            len,
        })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the range was mapped by `Mapping::new` and nothing borrows it past `self`.
        unsafe { libc::munmap(self.address.cast(), self.len) };
    }
}

/// A ring's positions and data, wherever they are mapped (the kernel's pages, or a test's
/// memory laid out the same way).
struct RingView<'a> {
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
    unsafe fn new(
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
    fn consume(&self, callback: &mut dyn FnMut(&[u8])) -> anyhow::Result<u64> {
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
#[path = "ring_reader_tests.rs"]
mod tests;
