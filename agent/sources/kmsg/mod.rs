//! XIDs from the kernel log: a thread that reads /dev/kmsg, keeps `NVRM: Xid` lines and hands
//! each as an `xid` batch to the sinks at once. The kernel log names the faulting process
//! (`pid=`, `name=`), which the tracepoint cannot.

pub mod parse;
pub mod reader;

use std::path::Path;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;
use std::time::Duration;

use gpuship_sinks::schema::{XidAnnotations, XidDetails, XidRecord, XidSource};

use self::parse::{parse_record, parse_xid, KmsgRecord, KmsgXid};
use self::reader::{KmsgReader, ReaderError, StartAt};
use crate::capture::CaptureContext;
use crate::config::KmsgStart;
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

/// Opens the log and starts the reader thread.
pub fn spawn(
    path: &Path,
    start: KmsgStart,
    context: CaptureContext,
) -> Result<JoinHandle<()>, ReaderError> {
    let start = match start {
        KmsgStart::End => StartAt::End,
        KmsgStart::Beginning => StartAt::Beginning,
    };
    let reader = KmsgReader::open(path, start)?;
    tracing::info!(path = %path.display(), ?start, "reading XIDs from the kernel log");
    let handle = std::thread::Builder::new()
        .name("gpuship-kmsg".into())
        .spawn(move || read_loop(reader, context))
        .map_err(|source| ReaderError::Read {
            path: path.to_path_buf(),
            source,
        })?;
    Ok(handle)
}

fn read_loop(mut reader: KmsgReader, context: CaptureContext) {
    let mut stopping = false;
    loop {
        // Once asked to stop, read only what is already there, then leave.
        let timeout = if stopping {
            Duration::ZERO
        } else {
            POLL_INTERVAL
        };
        match reader.next_record(timeout) {
            Ok(Some(raw)) => handle_record(raw, &context),
            Ok(None) if stopping => break,
            Ok(None) => {}
            Err(err) => {
                tracing::error!(%err, "kernel log reader failed; XIDs now come from the tracepoint only");
                break;
            }
        }
        context
            .accounting
            .kmsg
            .lost_gaps
            .store(reader.lost_records(), Ordering::Relaxed);
        if !stopping && context.stop.load(Ordering::Acquire) {
            stopping = true;
        }
    }
}

fn handle_record(raw: &[u8], context: &CaptureContext) {
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
    match parse_xid(&record.message) {
        Ok(Some(xid)) => {
            let row = xid_record(&record, xid, &context.clocks, &context.gpus);
            context.accounting.kmsg.xids.fetch_add(1, Ordering::Relaxed);
            // Reconciled, annotated, logged and sent by the XID stage.
            context.xid.report(row);
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
