//! What can go wrong with a spool.

use std::io;
use std::path::PathBuf;

/// Spool failures. Storing failures are the caller's to count; reading failures skip a segment.
#[derive(Debug, thiserror::Error)]
pub enum SpoolError {
    /// Filesystem error.
    #[error("spool {path}: {source}")]
    Io {
        /// File or directory.
        path: PathBuf,
        /// OS error.
        source: io::Error,
    },
    /// A segment that is not what it should be.
    #[error("spool segment {path} is corrupt: {reason}")]
    Corrupt {
        /// The segment.
        path: PathBuf,
        /// What check failed.
        reason: String,
    },
}
