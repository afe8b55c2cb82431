//! Each kind's Arrow schema as an Arrow IPC stream with no batches (`schemas/<kind>.arrows`):
//! how a reader on another arrow version than the sinks' (the lake, on DataFusion's) takes the
//! one definition of the columns without linking the sinks.
//!
//! The sinks' arrow schemas (`gpuship_sinks::schema::schema_for`) are the definition; these
//! files are written from them. A sinks unit test reads every file back and fails when it no
//! longer equals the schema; `GPUSHIP_WRITE_SCHEMAS=1 cargo test -p gpuship-sinks --lib
//! schema_files` rewrites them after a schema change.

use crate::EventKind;

/// The file under this crate's `schemas/` folder that holds `kind`'s schema.
pub fn file_name(kind: EventKind) -> String {
    format!("{kind}.arrows")
}

/// `kind`'s schema as Arrow IPC stream bytes (a schema message and the end marker).
pub fn schema_ipc(kind: EventKind) -> &'static [u8] {
    match kind {
        EventKind::Xid => include_bytes!("../schemas/xid.arrows"),
        EventKind::Cuda => include_bytes!("../schemas/cuda.arrows"),
        EventKind::Driver => include_bytes!("../schemas/driver.arrows"),
        EventKind::CudaStats => include_bytes!("../schemas/cuda_stats.arrows"),
        EventKind::CudaMemory => include_bytes!("../schemas/cuda_memory.arrows"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_a_stream_that_starts_with_a_message_and_ends_with_the_marker() {
        for &kind in EventKind::ALL {
            let bytes = schema_ipc(kind);
            // Each message starts with the continuation marker; the stream ends with it and a
            // zero length.
            assert_eq!(&bytes[..4], &[0xff; 4], "{kind}");
            assert_eq!(
                &bytes[bytes.len() - 8..],
                &[0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0],
                "{kind}"
            );
        }
        assert_eq!(file_name(EventKind::CudaStats), "cuda_stats.arrows");
    }
}
