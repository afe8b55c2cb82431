//! How each column is encoded in Parquet, and why. parquet-rs's default (a dictionary for every
//! column, min/max statistics for every page) costs a hash lookup and two comparisons per value;
//! at a million rows a second that is most of the sink's CPU, so columns opt out where the
//! dictionary or the statistics buy nothing.

use parquet::basic::Encoding;
use parquet::file::properties::{EnabledStatistics, WriterPropertiesBuilder};
use parquet::schema::types::ColumnPath;

/// Timestamps: near-monotonic and almost never repeated, so no dictionary (it would fill and
/// fall back to plain) and delta encoding, which stores them in a few bits each.
const DELTA_TIMES: [&str; 2] = ["time", "time_ns"];

/// 64-bit values that rarely repeat (durations, device addresses): no dictionary; zstd
/// compresses what repeats.
const NO_DICTIONARY: [&str; 2] = ["duration_ns", "device_ptr"];

/// Small integers (process and thread ids, CUresults, launch geometry): written plain. A
/// dictionary would be smaller before compression, but zstd makes the files the same size and
/// the plain write skips a hash lookup per value.
const PLAIN_INTEGERS: [&str; 10] = [
    "pid",
    "tid",
    "result",
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

/// Applies the choices above; a column a table does not have is ignored.
pub(super) fn column_encodings(mut builder: WriterPropertiesBuilder) -> WriterPropertiesBuilder {
    for column in DELTA_TIMES {
        builder = builder
            .set_column_dictionary_enabled(ColumnPath::from(column), false)
            .set_column_encoding(ColumnPath::from(column), Encoding::DELTA_BINARY_PACKED);
    }
    for column in NO_DICTIONARY {
        builder = builder.set_column_dictionary_enabled(ColumnPath::from(column), false);
    }
    for column in PLAIN_INTEGERS {
        builder = builder
            .set_column_dictionary_enabled(ColumnPath::from(column), false)
            .set_column_encoding(ColumnPath::from(column), Encoding::PLAIN);
    }
    for column in NO_STATISTICS {
        builder = builder
            .set_column_statistics_enabled(ColumnPath::from(column), EnabledStatistics::None);
    }
    builder
}
