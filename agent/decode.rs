//! What every source's record decoder shares: the error a malformed record is, the checked
//! copy of a ring record into its skeleton struct, and C strings as text.
//!
//! Records come from the kernel, so every one is checked (length, kind tag, ids) before use;
//! a bad record is an error the consumer counts and skips, never a panic. Layouts are the
//! skeleton types generated from `bpf/include/gpuship_events.h`; each source decodes its own
//! (`sources/<name>/decode.rs`). This module knows no source.

mod pod;

pub(crate) use pod::plain_record;

use std::borrow::Cow;

use bytemuck::Pod;

/// Why a record was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Shorter than the struct it should hold.
    #[error("record of {len} bytes is shorter than the {expected}-byte {kind} event")]
    TooShort {
        /// Record length.
        len: usize,
        /// Struct size.
        expected: usize,
        /// Which event.
        kind: &'static str,
    },
    /// The leading kind tag is not the expected one (wrong ring or ABI version).
    #[error("record kind tag {found:#x} is not {expected:#x} ({kind})")]
    WrongKind {
        /// Tag found.
        found: u32,
        /// Tag expected.
        expected: u32,
        /// Which event.
        kind: &'static str,
    },
    /// A CUDA event names a function id no probe was given.
    #[error("CUDA event for unknown function id {0}")]
    UnknownFunction(u32),
    #[error("driver event for unknown hook {0}")]
    UnknownHook(u32),
    /// A length field says more bytes than its buffer holds.
    #[error("{field} = {len} overruns its {capacity}-byte buffer")]
    FieldOverrun {
        /// The length field.
        field: &'static str,
        /// Its value.
        len: usize,
        /// The most it may say.
        capacity: usize,
    },
}

/// Copies a record into `T` after checking its length. The copy is unaligned-safe.
pub fn read_record<T: Pod>(raw: &[u8], kind: &'static str) -> Result<T, DecodeError> {
    let expected = std::mem::size_of::<T>();
    match raw.get(..expected) {
        Some(bytes) => Ok(bytemuck::pod_read_unaligned(bytes)),
        None => Err(DecodeError::TooShort {
            len: raw.len(),
            expected,
            kind,
        }),
    }
}

/// Text of a NUL-padded C char array (invalid UTF-8 is replaced, never rejected).
pub fn c_chars(chars: &[i8]) -> Cow<'_, str> {
    let bytes: &[u8] = bytemuck::cast_slice(chars);
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    // Names are almost always valid UTF-8: check that first, without the lossy path's chunking.
    match std::str::from_utf8(&bytes[..end]) {
        Ok(text) => Cow::Borrowed(text),
        Err(_) => String::from_utf8_lossy(&bytes[..end]),
    }
}

/// Raw bytes of a skeleton struct, for tests and benchmarks that build records by hand.
pub fn record_bytes<T: Pod>(value: &T) -> Vec<u8> {
    bytemuck::bytes_of(value).to_vec()
}
