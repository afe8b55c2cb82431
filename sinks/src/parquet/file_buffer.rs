//! The memory an open Parquet file is encoded into: how much room it gets up front.

use super::ParquetSinkConfig;

/// Room in `buffer` for a whole file, once its first row group is written: a file that gets that
/// far is likely to fill, and a buffer grown by doubling copies itself at every step and at the
/// last one holds the old and the new buffer together (8 MiB of buffer for a 4 MiB file). A file
/// closes at the first row group past `max_file_bytes`, so it rarely outgrows this; if it does,
/// the buffer grows as before.
pub(super) fn reserve_whole_file(buffer: &mut Vec<u8>, config: &ParquetSinkConfig) {
    let whole = config
        .max_file_bytes
        .saturating_add(config.row_group_bytes)
        .min(MAX_RESERVED_FILE_BYTES);
    buffer.reserve_exact(whole.saturating_sub(buffer.len()));
}

/// The most [`reserve_whole_file`] reserves at once (larger files grow by doubling beyond it).
pub(super) const MAX_RESERVED_FILE_BYTES: usize = 256 << 20;
