//! The spool's segment file format: a 32-byte header (magic, kind, event count, payload
//! length, CRC-32 of the payload) followed by one record batch as an Arrow IPC stream.
//!
//! Reading checks everything a damaged or planted file could get wrong (magic, kind, length,
//! checksum, rows and schema against the header) and reports it as [`SpoolError::Corrupt`];
//! it never panics. The kind byte is part of the on-disk format: a new kind takes a new byte
//! (the exhaustive `match` in [`kind_byte`]), and existing bytes never change.

use std::io::Read;
use std::path::Path;

use arrow_ipc::reader::StreamReader;
use arrow_ipc::writer::StreamWriter;

use super::{corrupt, io_err, private, SpoolError};
use crate::schema::schema_for;
use crate::secure_fs;
use crate::{EventBatch, EventKind};

pub(super) const MAGIC: &[u8; 8] = b"GPSHSPL1";
pub(super) const HEADER_LEN: usize = 32;

/// The header and payload of `batch`'s segment.
pub(super) fn encode(
    batch: &EventBatch,
) -> Result<([u8; HEADER_LEN], Vec<u8>), arrow_schema::ArrowError> {
    let mut payload = Vec::with_capacity(batch.records.get_array_memory_size() / 2);
    let mut writer = StreamWriter::try_new(&mut payload, &batch.records.schema())?;
    writer.write(&batch.records)?;
    writer.finish()?;
    drop(writer);
    let mut header = [0u8; HEADER_LEN];
    header[..8].copy_from_slice(MAGIC);
    header[8] = kind_byte(batch.kind);
    header[12..16].copy_from_slice(&(batch.len() as u32).to_le_bytes());
    header[16..24].copy_from_slice(&(payload.len() as u64).to_le_bytes());
    header[24..28].copy_from_slice(&crc32fast::hash(&payload).to_le_bytes());
    Ok((header, payload))
}

/// The header byte of each kind (on-disk format: never renumber).
fn kind_byte(kind: EventKind) -> u8 {
    match kind {
        EventKind::Xid => 1,
        EventKind::Cuda => 2,
        EventKind::Driver => 3,
        EventKind::CudaStats => 4,
        EventKind::CudaMemory => 5,
    }
}

/// The kind a header byte names, if any.
fn kind_of_byte(byte: u8) -> Option<EventKind> {
    EventKind::all().find(|&kind| kind_byte(kind) == byte)
}

/// What a corrupt segment's header claims, as far as it can be read.
/// None for either when the header is too damaged to say.
pub(super) fn claimed(path: &Path) -> (Option<EventKind>, Option<u64>) {
    let mut header = [0u8; HEADER_LEN];
    let readable = secure_fs::open_read(path)
        .ok()
        .is_some_and(|mut f| f.read_exact(&mut header).is_ok());
    if !readable || &header[..8] != MAGIC {
        return (None, None);
    }
    let Some(kind) = kind_of_byte(header[8]) else {
        return (None, None);
    };
    let events = u32::from_le_bytes(header[12..16].try_into().unwrap_or_default()) as u64;
    (Some(kind), Some(events))
}

pub(super) fn read_header(path: &Path) -> Result<(EventKind, u64, u64), SpoolError> {
    let mut header = [0u8; HEADER_LEN];
    let mut file = secure_fs::open_read(path).map_err(|e| private(path, e))?;
    let size = file.metadata().map_err(io_err(path))?.len();
    file.read_exact(&mut header)
        .map_err(|_| corrupt(path, "shorter than its header"))?;
    if &header[..8] != MAGIC {
        return Err(corrupt(path, "bad magic"));
    }
    let Some(kind) = kind_of_byte(header[8]) else {
        return Err(corrupt(path, &format!("unknown kind {}", header[8])));
    };
    let events = u32::from_le_bytes(header[12..16].try_into().unwrap_or_default()) as u64;
    let payload = u64::from_le_bytes(header[16..24].try_into().unwrap_or_default());
    // Checked: a corrupt length near u64::MAX must not overflow.
    let expected = payload.checked_add(HEADER_LEN as u64);
    if expected != Some(size) {
        return Err(corrupt(
            path,
            &format!("{size} bytes on disk, header says {HEADER_LEN} + {payload}"),
        ));
    }
    Ok((kind, events, size))
}

pub(super) fn read_segment(path: &Path) -> Result<EventBatch, SpoolError> {
    let (kind, events, _) = read_header(path)?;
    let mut data = Vec::new();
    secure_fs::open_read(path)
        .map_err(|e| private(path, e))?
        .read_to_end(&mut data)
        .map_err(io_err(path))?;
    let payload = &data[HEADER_LEN..];
    let crc = u32::from_le_bytes(data[24..28].try_into().unwrap_or_default());
    if crc32fast::hash(payload) != crc {
        return Err(corrupt(path, "checksum mismatch"));
    }
    // Arrow's IPC reader panics on some malformed streams (seen: a misaligned offsets buffer
    // under a valid checksum) instead of failing; such a segment is corrupt, not a crash.
    let records = std::panic::catch_unwind(|| decode_payload(payload))
        .unwrap_or_else(|_| Err("the Arrow IPC reader panicked".to_string()))
        .map_err(|reason| corrupt(path, &reason))?;
    if records.num_rows() as u64 != events || records.schema().fields() != schema_for(kind).fields()
    {
        return Err(corrupt(path, "rows or schema differ from the header"));
    }
    Ok(EventBatch::new(
        kind,
        records
            .with_schema(schema_for(kind))
            .map_err(|e| corrupt(path, &e.to_string()))?,
    ))
}

/// The one record batch of a segment's Arrow IPC stream.
fn decode_payload(payload: &[u8]) -> Result<arrow_array::RecordBatch, String> {
    let mut reader = StreamReader::try_new(payload, None).map_err(|e| e.to_string())?;
    reader
        .next()
        .ok_or_else(|| "no record batch".to_string())?
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_its_own_byte_and_reads_back() {
        let bytes: Vec<u8> = EventKind::all().map(kind_byte).collect();
        assert_eq!(bytes, vec![1, 2, 3, 4, 5], "on-disk bytes never change");
        for kind in EventKind::all() {
            assert_eq!(kind_of_byte(kind_byte(kind)), Some(kind));
        }
        assert_eq!(kind_of_byte(0), None);
        assert_eq!(kind_of_byte(6), None);
    }
}
