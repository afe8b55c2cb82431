//! Reads raw records from `/dev/kmsg`, one record per `read(2)`.
//!
//! This module owns the file descriptor and the kernel's read semantics
//! (non-blocking reads, `EPIPE` on overwritten records, `poll(2)` wake-ups).
//! It must not parse or interpret records — that is `parse`'s job — and must
//! not block indefinitely, so the caller can notice a stop request between
//! calls.

use std::fs::OpenOptions;
use std::io::{self, Seek, SeekFrom};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use thiserror::Error;

/// The kernel's limit on one formatted record (`CONSOLE_EXT_LOG_MAX`); a
/// smaller buffer makes `read` fail with `EINVAL` for long records.
const RECORD_BUF_LEN: usize = 8192;

/// Where the first read starts in the kernel's ring buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartAt {
    /// Only records logged after `open` (normal agent start).
    End,
    /// The oldest record still in the ring buffer (catch up after boot).
    Beginning,
}

/// Failures talking to the kmsg device; each names the path and carries the
/// OS error (whose Display includes the errno).
#[derive(Debug, Error)]
pub enum ReaderError {
    #[error("cannot open {path}: {source}")]
    Open {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot seek {path} to its {whence}: {source}")]
    Seek {
        path: PathBuf,
        whence: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("poll on {path} failed: {source}")]
    Poll {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("read from {path} failed: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// A non-blocking reader of `/dev/kmsg` records.
#[derive(Debug)]
pub struct KmsgReader {
    fd: OwnedFd,
    path: PathBuf,
    buf: Vec<u8>,
    lost_records: u64,
    /// True once a read found no record waiting: every record after that was logged while
    /// the reader waited, and is read as it comes.
    caught_up: bool,
}

impl KmsgReader {
    /// Opens `path` non-blocking and positions it per `start`.
    pub fn open(path: &Path, start: StartAt) -> Result<Self, ReaderError> {
        // std always adds O_CLOEXEC; O_NONBLOCK keeps `read` from blocking
        // past our timeout when no record is pending.
        let mut file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(path)
            .map_err(|source| ReaderError::Open {
                path: path.to_path_buf(),
                source,
            })?;
        // On kmsg, SEEK_END means "only records logged from now on" and
        // SEEK_SET "the oldest record still buffered"; offsets are ignored.
        let (pos, whence) = match start {
            StartAt::End => (SeekFrom::End(0), "end"),
            StartAt::Beginning => (SeekFrom::Start(0), "beginning"),
        };
        file.seek(pos).map_err(|source| ReaderError::Seek {
            path: path.to_path_buf(),
            whence,
            source,
        })?;
        Ok(Self {
            fd: OwnedFd::from(file),
            path: path.to_path_buf(),
            buf: vec![0; RECORD_BUF_LEN],
            lost_records: 0,
            caught_up: false,
        })
    }

    /// Waits up to `timeout` for the next record; Ok(None) on timeout. Uses
    /// poll(2) so the caller can check a stop flag between calls.
    pub fn next_record(&mut self, timeout: Duration) -> Result<Option<&[u8]>, ReaderError> {
        // A deadline too far away to represent means "wait until a record".
        let deadline = Instant::now().checked_add(timeout);
        loop {
            let err = match self.read_once() {
                Ok(0) => {
                    // Only a regular file (tests, replays) reports EOF;
                    // sleeping keeps a caller's loop from spinning on it.
                    if let Some(remaining) = remaining(deadline) {
                        std::thread::sleep(remaining);
                    }
                    return Ok(None);
                }
                Ok(len) => return Ok(self.buf.get(..len)),
                Err(err) => err,
            };
            match err.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::EPIPE) => {
                    // The kernel has already moved our position past the gap,
                    // so the next read returns the oldest surviving record.
                    self.lost_records += 1;
                    tracing::warn!(
                        path = %self.path.display(),
                        lost_gaps = self.lost_records,
                        "kmsg records were overwritten before they were read; continuing after the gap"
                    );
                }
                Some(code) if code == libc::EAGAIN || code == libc::EWOULDBLOCK => {
                    self.caught_up = true;
                    if !self.wait_readable(deadline)? {
                        return Ok(None);
                    }
                }
                _ => {
                    return Err(ReaderError::Read {
                        path: self.path.clone(),
                        source: err,
                    })
                }
            }
        }
    }

    /// Whether the reader has read the whole log once (the records it returns now are read as
    /// they are logged).
    pub fn caught_up(&self) -> bool {
        self.caught_up
    }

    /// Records the kernel overwrote before we read them (read() returned
    /// EPIPE); reading continues after the gap. The kernel does not say how
    /// many records a gap held, so this counts gaps.
    pub fn lost_records(&self) -> u64 {
        self.lost_records
    }

    fn read_once(&mut self) -> io::Result<usize> {
        // SAFETY: `fd` is an open descriptor owned by `self`, and the pointer
        // and length describe `self.buf`, which is exclusively borrowed and
        // stays alive for the whole call.
        let n = unsafe {
            libc::read(
                self.fd.as_raw_fd(),
                self.buf.as_mut_ptr().cast(),
                self.buf.len(),
            )
        };
        usize::try_from(n).map_err(|_| io::Error::last_os_error())
    }

    /// Polls until the fd is readable or `deadline` passes; false on timeout.
    fn wait_readable(&self, deadline: Option<Instant>) -> Result<bool, ReaderError> {
        loop {
            let timeout_ms = match deadline {
                None => -1,
                Some(deadline) => match remaining(Some(deadline)) {
                    None => return Ok(false),
                    Some(left) => poll_timeout_ms(left),
                },
            };
            let mut pfd = libc::pollfd {
                fd: self.fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: `pfd` is a valid, initialised pollfd that lives across
            // the call, and we pass a count of exactly one.
            let ready = unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
            if ready > 0 {
                if pfd.revents & libc::POLLNVAL != 0 {
                    return Err(ReaderError::Poll {
                        path: self.path.clone(),
                        source: io::Error::from_raw_os_error(libc::EBADF),
                    });
                }
                // POLLERR on kmsg means records were overwritten; the next
                // read reports that as EPIPE, so any wake-up means "read".
                return Ok(true);
            }
            if ready == 0 {
                return Ok(false);
            }
            let err = io::Error::last_os_error();
            if err.raw_os_error() != Some(libc::EINTR) {
                return Err(ReaderError::Poll {
                    path: self.path.clone(),
                    source: err,
                });
            }
        }
    }
}

/// Time left before `deadline`; None when it has passed or there is none.
fn remaining(deadline: Option<Instant>) -> Option<Duration> {
    deadline
        .map(|d| d.saturating_duration_since(Instant::now()))
        .filter(|left| !left.is_zero())
}

/// Rounds up so a sub-millisecond remainder waits instead of spinning with 0.
fn poll_timeout_ms(left: Duration) -> libc::c_int {
    let ms = left.as_nanos().div_ceil(1_000_000);
    libc::c_int::try_from(ms).unwrap_or(libc::c_int::MAX)
}

#[cfg(test)]
mod tests {
    use super::super::parse::parse_record;
    use super::*;
    use std::io::Write;
    use std::time::{SystemTime, UNIX_EPOCH};

    const KMSG: &str = "/dev/kmsg";

    /// Opens /dev/kmsg. The suite runs as root (see the README); a failure here is a failure,
    /// never a skip.
    fn open_kmsg(start: StartAt) -> KmsgReader {
        KmsgReader::open(Path::new(KMSG), start).expect("open /dev/kmsg (tests run as root)")
    }

    #[test]
    fn open_nonexistent_path_names_the_path() {
        let path = Path::new("/nonexistent/gpuship/kmsg");
        let err = KmsgReader::open(path, StartAt::End).expect_err("must fail");
        assert!(
            matches!(&err, ReaderError::Open { source, .. } if source.raw_os_error() == Some(libc::ENOENT))
        );
        let text = err.to_string();
        assert!(text.contains("/nonexistent/gpuship/kmsg"), "{text}");
        assert!(text.contains("os error 2"), "{text}");
    }

    #[test]
    fn regular_file_reads_then_times_out_at_eof() {
        let path = std::env::temp_dir().join(format!("gpuship-kmsg-test-{}", std::process::id()));
        std::fs::write(&path, b"6,1,2,-;hello\n").expect("write temp file");
        let mut reader = KmsgReader::open(&path, StartAt::Beginning).expect("open temp file");
        let rec = reader
            .next_record(Duration::from_millis(10))
            .expect("read")
            .map(<[u8]>::to_vec);
        assert_eq!(rec.as_deref(), Some(&b"6,1,2,-;hello\n"[..]));
        let started = Instant::now();
        assert_eq!(
            reader.next_record(Duration::from_millis(30)).expect("eof"),
            None
        );
        assert!(started.elapsed() >= Duration::from_millis(30));
        assert_eq!(reader.lost_records(), 0);
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn poll_timeout_rounds_up_and_saturates() {
        assert_eq!(poll_timeout_ms(Duration::from_micros(1)), 1);
        assert_eq!(poll_timeout_ms(Duration::from_millis(5)), 5);
        assert_eq!(poll_timeout_ms(Duration::MAX), libc::c_int::MAX);
    }

    #[test]
    #[cfg_attr(
        not(feature = "root-tests"),
        ignore = "needs root: `make test` runs it"
    )]
    fn kmsg_from_beginning_yields_parseable_record() {
        let mut reader = open_kmsg(StartAt::Beginning);
        let raw = reader
            .next_record(Duration::from_secs(1))
            .expect("read kmsg")
            .expect("the kernel ring buffer holds boot records");
        let rec = parse_record(raw).expect("kernel record parses");
        assert!(rec.level <= 7);
    }

    #[test]
    #[cfg_attr(
        not(feature = "root-tests"),
        ignore = "needs root: `make test` runs it"
    )]
    fn kmsg_from_end_sees_our_own_write() {
        let mut reader = open_kmsg(StartAt::End);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        let token = format!("gpuship-reader-test {}-{nanos}", std::process::id());
        let mut writer = OpenOptions::new()
            .write(true)
            .open(KMSG)
            .expect("open /dev/kmsg for writing (tests run as root)");
        writer
            .write_all(format!("<6>{token}\n").as_bytes())
            .expect("write kmsg");

        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            let Some(raw) = reader
                .next_record(Duration::from_millis(200))
                .expect("read")
            else {
                continue;
            };
            let rec = parse_record(raw).expect("kernel record parses");
            if rec.message.contains(&token) {
                assert_eq!(rec.level, 6);
                return;
            }
        }
        panic!("did not read back {token:?} from {KMSG}");
    }
}
