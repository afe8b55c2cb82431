//! XIDs from the kernel log: a thread that reads /dev/kmsg, keeps `NVRM: Xid` lines and hands
//! each as an `xid` batch to the sinks at once. The kernel log names the faulting process
//! (`pid=`, `name=`), which the tracepoint cannot.
//!
//! With a state directory, the reader keeps a cursor there ([`cursor`]) and resumes after it
//! when restarted within the same boot, so XIDs logged while the agent was down are read, and
//! none twice.
//!
//! [`source`] starts it as a thread source; XIDs go to the XID sink, never to the stage itself.

pub mod clock;
pub mod cursor;
pub mod doctor;
pub mod parse;
pub mod reader;
pub mod source;

pub use source::KmsgSource;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use gpuship_sinks::schema::{HostIdentity, XidAnnotations, XidDetails, XidRecord, XidSource};

use self::clock::{monotonic_now_us, KmsgClock};
use self::cursor::{CursorFile, Loaded, Resume};
use self::parse::{parse_record, parse_xid, KmsgRecord, KmsgXid};
use self::reader::{KmsgReader, ReaderError, StartAt};
use super::output::XidSink;
use super::xid_config::KmsgStart;
use crate::accounting::state_files::StateFile;
use crate::accounting::Accounting;
use crate::enrich::{Clocks, GpuDirectory};

/// How often the reader checks whether it should stop.
const POLL_INTERVAL: Duration = Duration::from_millis(100);

/// The row for one parsed XID line.
pub fn xid_record(
    record: &KmsgRecord<'_>,
    xid: KmsgXid,
    clocks: &Clocks,
    gpus: &GpuDirectory,
) -> XidRecord {
    XidRecord {
        time_ns: clocks.kmsg_to_unix_ns(record.timestamp_us),
        code: xid.code,
        gpu: gpus.lookup(&xid.pci_bus_id),
        pci_bus_id: xid.pci_bus_id,
        message: xid.message,
        source: XidSource::Kmsg,
        pid: xid.pid,
        comm: xid.comm,
        reporter_pid: None,
        reporter_comm: None,
        kmsg_seq: Some(record.seq),
        message_truncated: false,
        raw_kmsg: Some(record.message.trim_end().to_string()),
        annotations: XidAnnotations {
            details: XidDetails {
                mig_gpu_instance: xid.mig_gpu_instance,
                mig_compute_instance: xid.mig_compute_instance,
                ..Default::default()
            },
            ..Default::default()
        },
        ..XidRecord::new(XidSource::Kmsg)
    }
}

/// What the reader needs: where rows come from, where XIDs go, what it counts, when to stop.
#[derive(Clone)]
pub struct KmsgContext {
    /// Host identity (its boot id keys the cursor).
    pub identity: HostIdentity,
    /// Clock offsets.
    pub clocks: Clocks,
    /// GPUs by bus id.
    pub gpus: Arc<GpuDirectory>,
    /// Counters (`kmsg`).
    pub accounting: Arc<Accounting>,
    /// Set to stop; the reader takes what is already in the log first.
    pub stop: Arc<AtomicBool>,
    /// Where XIDs go.
    pub xids: Arc<dyn XidSink>,
}

/// How far the reader got, and the cursor file it keeps (when there is a state directory).
#[derive(Debug)]
struct Progress {
    file: Option<CursorFile>,
    /// Records up to this sequence number are skipped (read before a restart).
    skip_through: Option<u64>,
    /// The highest sequence number read.
    last_read: Option<u64>,
    /// Records of this boot whose XIDs a previous run journaled but had not yet passed the
    /// cursor for (killed between the two): skipped, or they would be written twice.
    journaled: std::collections::BTreeSet<u64>,
    /// The last save failed (logged once until a save works again).
    save_failing: bool,
}

impl Progress {
    /// Saves how far every record is handled: the last one read, but never past an XID the
    /// XID sink has not yet handed to the sinks.
    fn sync(&mut self, stage: &dyn XidSink, force: bool) {
        let (Some(file), Some(last)) = (self.file.as_mut(), self.last_read) else {
            return;
        };
        let handled = match stage.oldest_unsettled_kmsg() {
            Some(0) => return,
            Some(oldest) => last.min(oldest - 1),
            None => last,
        };
        match file.advance(handled, force) {
            Ok(()) if self.save_failing && file.saved() == Some(handled) => {
                self.save_failing = false;
                tracing::info!("the kernel-log cursor is saved again");
            }
            Ok(()) => {}
            // Retried at every pass; logged once until it works again.
            Err(err) if !self.save_failing => {
                self.save_failing = true;
                tracing::error!(%err, "cannot save the kernel-log cursor; a restart may read these XIDs again (retrying; logged once until it works)");
            }
            Err(_) => {}
        }
    }
}

/// The running reader.
pub struct KmsgThread {
    handle: Option<JoinHandle<()>>,
    progress: Arc<Mutex<Progress>>,
    xids: Arc<dyn XidSink>,
}

impl KmsgThread {
    /// Waits for the thread, which ends once the stop flag is set.
    pub fn join(&mut self) {
        if let Some(handle) = self.handle.take() {
            if handle.join().is_err() {
                tracing::error!("kernel log thread panicked");
            }
        }
    }

    /// Once the XID sink has emitted what it held: saves the final cursor.
    pub fn save_cursor(&self) {
        lock(&self.progress).sync(&*self.xids, true);
    }
}

fn lock(progress: &Mutex<Progress>) -> std::sync::MutexGuard<'_, Progress> {
    progress.lock().unwrap_or_else(|e| e.into_inner())
}

/// Opens the log where the cursor under `state_dir` (if any) says, and starts the reader.
/// `journaled` are kernel-log sequence numbers of this boot whose XIDs are already in a
/// sink's XID journal.
pub fn spawn(
    path: &Path,
    start: KmsgStart,
    state_dir: Option<&Path>,
    journaled: std::collections::BTreeSet<u64>,
    context: KmsgContext,
) -> Result<KmsgThread, ReaderError> {
    let mut file = state_dir.map(|dir| CursorFile::new(dir, &context.identity.boot_id));
    // With a cursor to check and keep: the log read once to its end, for its last sequence
    // number (a cursor past it is refused; a start from the end starts the cursor there).
    let mut at_end = match file {
        Some(_) => Some(skip_existing(path)?),
        None => None,
    };
    let last = at_end.as_ref().and_then(|(_, last)| *last);
    let resume = match file.as_mut().map(|file| (file.load(last), file.path())) {
        None | Some((Ok(Loaded::Absent), _)) => {
            cursor::plan(None, &context.identity.boot_id, start)
        }
        Some((Ok(Loaded::Cursor(saved)), _)) => {
            cursor::plan(Some(&saved), &context.identity.boot_id, start)
        }
        Some((
            Ok(Loaded::SetAside {
                reason,
                detail,
                aside,
            }),
            cursor_path,
        )) => {
            context
                .accounting
                .state_files
                .set_aside(StateFile::KmsgCursor, reason);
            let moved = match aside {
                Ok(aside) => format!("renamed to {}", aside.display()),
                Err(err) => format!("could not be renamed ({err})"),
            };
            tracing::warn!(
                path = %cursor_path.display(),
                reason = reason.name(),
                problem = %detail,
                "kernel-log cursor set aside ({moved}); reading this boot's kernel log from its first record so that no XID is missed (XIDs delivered before it was damaged may be delivered again)"
            );
            Resume::FromBeginning
        }
        Some((Err(err), _)) => {
            tracing::error!(%err, "cannot read the kernel-log cursor; reading this boot's kernel log from its first record so that no XID is missed");
            Resume::FromBeginning
        }
    };
    let (reader, skip_through, last_read) = match (resume, at_end.take()) {
        (Resume::FromEnd, Some((reader, last))) => (reader, last, last),
        (Resume::FromEnd, None) => (KmsgReader::open(path, StartAt::End)?, None, None),
        (Resume::FromBeginning, _) => (KmsgReader::open(path, StartAt::Beginning)?, None, None),
        (Resume::After(seq), _) => (KmsgReader::open(path, StartAt::Beginning)?, Some(seq), None),
    };
    tracing::info!(path = %path.display(), ?resume, "reading XIDs from the kernel log");
    let progress = Arc::new(Mutex::new(Progress {
        file,
        skip_through,
        last_read,
        journaled,
        save_failing: false,
    }));
    let thread_progress = progress.clone();
    let xids = context.xids.clone();
    let handle = std::thread::Builder::new()
        .name("gpuship-kmsg".into())
        .spawn(move || read_loop(reader, context, thread_progress))
        .map_err(|source| ReaderError::Read {
            path: path.to_path_buf(),
            source,
        })?;
    Ok(KmsgThread {
        handle: Some(handle),
        progress,
        xids,
    })
}

fn read_loop(mut reader: KmsgReader, context: KmsgContext, progress: Arc<Mutex<Progress>>) {
    let mut stopping = false;
    let mut clock = KmsgClock::default();
    loop {
        // Once asked to stop, read only what is already there, then leave.
        let timeout = if stopping {
            Duration::ZERO
        } else {
            POLL_INTERVAL
        };
        // Records are read live once the reader has reached the log's end (see clock.rs).
        let live = reader.caught_up();
        match reader.next_record(timeout) {
            Ok(Some(raw)) => {
                let read_live = live.then(monotonic_now_us);
                handle_record(raw, read_live, &mut clock, &context, &progress)
            }
            Ok(None) if stopping => break,
            Ok(None) => {}
            Err(err) => {
                tracing::error!(%err, "kernel log reader failed; XIDs now come from the tracepoint only");
                break;
            }
        }
        lock(&progress).sync(&*context.xids, false);
        context
            .accounting
            .kmsg
            .lost_gaps
            .store(reader.lost_records(), Ordering::Relaxed);
        if !stopping && context.stop.load(Ordering::Acquire) {
            stopping = true;
        }
    }
    lock(&progress).sync(&*context.xids, true);
}

/// Opens the log at its beginning and reads every record already there; returns the reader
/// and the last sequence number read.
fn skip_existing(path: &Path) -> Result<(KmsgReader, Option<u64>), ReaderError> {
    let mut reader = KmsgReader::open(path, StartAt::Beginning)?;
    let mut last = None;
    while let Some(raw) = reader.next_record(Duration::ZERO)? {
        if let Ok(record) = parse_record(raw) {
            last = Some(record.seq);
        }
    }
    Ok((reader, last))
}

/// Notes that `seq` was read; false when it was already handled before a restart.
fn first_reading(seq: u64, progress: &Mutex<Progress>) -> bool {
    let mut progress = lock(progress);
    if progress.journaled.remove(&seq) {
        progress.last_read = Some(progress.last_read.map_or(seq, |last| last.max(seq)));
        return false;
    }
    if let Some(skip) = progress.skip_through {
        if seq <= skip {
            return false;
        }
        if progress.last_read.is_none() && seq > skip + 1 {
            tracing::warn!(
                resumed_after = skip,
                first_available = seq,
                records_lost = seq - skip - 1,
                "kernel-log records logged while the agent was down were overwritten before it restarted; XIDs among them are lost"
            );
        }
    }
    progress.last_read = Some(progress.last_read.map_or(seq, |last| last.max(seq)));
    true
}

/// One record: an XID becomes a row, its time corrected by the log clock's offset (`read_live`:
/// when it was read, for a record read as it was logged).
fn handle_record(
    raw: &[u8],
    read_live: Option<u64>,
    clock: &mut KmsgClock,
    context: &KmsgContext,
    progress: &Mutex<Progress>,
) {
    let record = match parse_record(raw) {
        Ok(record) => record,
        Err(err) => {
            // Not an XID we can recognize; only count it when it looked like one.
            if String::from_utf8_lossy(raw).contains("NVRM: Xid") {
                context
                    .accounting
                    .kmsg
                    .parse_errors
                    .fetch_add(1, Ordering::Relaxed);
                tracing::error!(%err, "unreadable kernel log record that mentions an XID");
            }
            return;
        }
    };
    if let Some(read_us) = read_live {
        clock.observe(read_us, record.timestamp_us);
    }
    if !first_reading(record.seq, progress) {
        return;
    }
    match parse_xid(&record.message) {
        Ok(Some(xid)) => {
            if let Some(file) = lock(progress).file.as_mut() {
                file.xid_seen(record.seq);
            }
            let mut row = xid_record(&record, xid, &context.clocks, &context.gpus);
            row.time_ns = row.time_ns.saturating_add(clock.offset_ns());
            context.accounting.kmsg.xids.fetch_add(1, Ordering::Relaxed);
            // Reconciled, annotated, logged and sent by the XID sink.
            context.xids.report(row);
        }
        Ok(None) => {}
        Err(err) => {
            context
                .accounting
                .kmsg
                .parse_errors
                .fetch_add(1, Ordering::Relaxed);
            tracing::error!(%err, "XID line could not be parsed; it is not recorded as a row");
        }
    }
}
