//! How each column is encoded in Parquet, and why. parquet-rs's default (a dictionary for every
//! column, min/max statistics for every page) costs a hash lookup and two comparisons per value;
//! at a million rows a second that is most of the sink's CPU, so columns opt out where the
//! dictionary or the statistics buy nothing.

use parquet::basic::{Compression, Encoding};
use parquet::file::properties::{EnabledStatistics, WriterPropertiesBuilder};
use parquet::schema::types::ColumnPath;

/// Timestamps: near-monotonic and almost never repeated, so no dictionary (it would fill and
/// fall back to plain) and delta encoding, which stores them in a few bits each.
const DELTA_TIMES: [&str; 2] = ["time", "time_ns"];

/// 64-bit values that rarely repeat (durations, device addresses): no dictionary; zstd
/// compresses what repeats.
const NO_DICTIONARY: [&str; 2] = ["duration_ns", "device_ptr"];

/// Small integers (process and thread ids, CUresults, launch geometry, the GPU's index):
/// written plain. A dictionary would be smaller before compression, but zstd makes the files
/// the same size and the plain write skips a hash lookup per value.
const PLAIN_INTEGERS: [&str; 11] = [
    "pid",
    "tid",
    "result",
    "gpu_index",
    "grid_x",
    "grid_y",
    "grid_z",
    "block_x",
    "block_y",
    "block_z",
    "shared_mem_bytes",
];

/// Strings whose min/max prune nothing (a row group holds every function, thread name and
/// result name in about the same range, and an agent's file the few GPUs and kernels of its
/// node): no statistics, which saves two comparisons per value (`benches/column_cost.rs`
/// measures each column). `host`, `boot_id`, `time` and `result` keep theirs: readers skip
/// files of other hosts and row groups without failures (`result <> 0`) on them. Compaction
/// writes its own files, sorted, with statistics on every column.
const NO_STATISTICS: [&str; 7] = [
    "comm",
    "function",
    "result_name",
    "kernel_name",
    "kernel_name_demangled",
    "gpu_uuid",
    "pci_bus_id",
];

/// Columns zstd cannot shrink, written uncompressed. parquet-rs makes a zstd compressor and a
/// decompressor (about 180 KiB together) for every compressed column of each row group it
/// writes, so each column here is that much less memory, and no time spent compressing. `host`
/// and `boot_id` hold one value per file (their dictionary indices are one run); `time_ns` is
/// delta-encoded nanoseconds whose low bits are noise (zstd took 1,683,070 bytes to 1,683,466 in
/// a 1.1 M-row file); the incident and out-of-memory columns are null but in rare rows; a GPU's
/// UUID and bus id are a dictionary of the node's few GPUs and an index per row that is one run
/// while a process stays on one GPU.
const UNCOMPRESSED: [&str; 17] = [
    "host",
    "boot_id",
    "gpu_uuid",
    "pci_bus_id",
    "time_ns",
    "incident_id",
    "held_memory.device_bytes",
    "held_memory.managed_bytes",
    "held_memory.host_pinned_bytes",
    "held_memory.pool_bytes",
    "held_memory.physical_bytes",
    "held_memory.seen_from_start",
    "largest_allocations.list.item.address",
    "largest_allocations.list.item.bytes",
    "largest_allocations.list.item.kind",
    "largest_allocations.list.item.function",
    "largest_allocations.list.item.time_ns",
];

/// Columns that hold one value across many rows: `host` and `boot_id` in every row an agent
/// writes, a GPU's UUID and bus id in every row of a process on one GPU (`gpuship run -- CMD`
/// records one process). While a row group's rows all hold the same value, the file encoder
/// counts them instead of handing each to parquet-rs's dictionary (a hash and a lookup per row)
/// and writes the chunk parquet-rs would have written (`file_encoder/constant_chunk.rs`); a row
/// with another value, or without one, hands the column back to parquet-rs for the rest of the
/// row group.
pub(super) const COUNTED_WHILE_CONSTANT: [&str; 4] = ["host", "boot_id", "gpu_uuid", "pci_bus_id"];

/// The path of a leaf column written with dots (`held_memory.pool_bytes`).
fn leaf(path: &str) -> ColumnPath {
    ColumnPath::new(path.split('.').map(str::to_string).collect())
}

/// Applies the choices above; a column a table does not have is ignored.
pub(super) fn column_encodings(mut builder: WriterPropertiesBuilder) -> WriterPropertiesBuilder {
    for column in DELTA_TIMES {
        builder = builder
            .set_column_dictionary_enabled(leaf(column), false)
            .set_column_encoding(leaf(column), Encoding::DELTA_BINARY_PACKED);
    }
    for column in NO_DICTIONARY {
        builder = builder.set_column_dictionary_enabled(leaf(column), false);
    }
    for column in PLAIN_INTEGERS {
        builder = builder
            .set_column_dictionary_enabled(leaf(column), false)
            .set_column_encoding(leaf(column), Encoding::PLAIN);
    }
    for column in UNCOMPRESSED {
        builder = builder.set_column_compression(leaf(column), Compression::UNCOMPRESSED);
    }
    for column in NO_STATISTICS {
        builder = builder.set_column_statistics_enabled(leaf(column), EnabledStatistics::None);
    }
    builder
}
