//! Reads the BPF ring buffers: maps each ring as libbpf maps it (a writable consumer page, then a
//! read-only producer page followed by the data pages mapped twice, so that a record that wraps
//! past the end reads as one slice), waits on all of them with one epoll, and hands each ring's
//! records to its callback through [`record_walk`], which gives the space back to the kernel in
//! steps, not after every record.
//!
//! Why not libbpf's `ring_buffer`: it stores the consumer position after every record, and the
//! BPF programs read that position on every reserve and every `bpf_ringbuf_query`. While traced
//! threads on other CPUs produce, each of those stores has to take the position's cache line
//! back from them, and the consumer's next locked instruction waits for it. On the 16-CPU H200
//! host the ring callback's samples fell from 483 to 283 of a run with the position stored every
//! 16 KiB instead (docs/performance.md). A ring that fails a pass does not keep the others from
//! being read.

mod record_walk;

use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use anyhow::{bail, Context};
use libbpf_rs::MapCore;

use self::record_walk::RingView;

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
