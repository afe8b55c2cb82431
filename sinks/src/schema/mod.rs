//! The Arrow schema of every event kind and the builders that fill them.
//!
//! Column names are a contract: users' queries, DuckDB views and downstream consumers rely on
//! them (see `docs/schema.md`). Existing columns never change type or meaning; new columns are
//! added as nullable, and [`SCHEMA_VERSION`] is raised, so readers can use `union_by_name`.

mod common;
pub mod cuda;
pub mod cuda_memory;
pub mod cuda_stats;
pub mod driver;
mod nullable;
mod row_batch;
pub mod workload;
pub mod xid;

use std::sync::Arc;

use arrow_schema::Schema;

pub(crate) use common::repeated;
pub use common::{HostIdentity, COMMON_FIELD_COUNT};
pub use cuda::{
    CallGpu, CallObjects, CudaBatchBuilder, CudaRow, HeldMemory, LargeAllocation, LaunchDims,
    MEMORY_KINDS,
};
pub use cuda_memory::{CudaMemoryBatchBuilder, CudaMemoryRow};
pub use cuda_stats::{CudaStatsBatchBuilder, CudaStatsRow, DurationBucket, DurationStats};
pub use driver::{DriverBatchBuilder, DriverRow};
pub use row_batch::{KindRows, RowBatchBuilder};
pub use workload::{Workload, WORKLOAD_COLUMNS};
pub use xid::{
    batch_of as xid_batch_of, GpuIdentity, KernelSuspect, XidAnnotations, XidBatchBuilder,
    XidDetails, XidRecord, XidSource,
};

use crate::EventKind;

/// Version of the column layout, stored in Parquet key-value metadata and Kafka headers.
pub const SCHEMA_VERSION: &str = "7";
/// Metadata key holding [`SCHEMA_VERSION`].
pub const SCHEMA_VERSION_KEY: &str = "gpuship.schema_version";
/// Metadata key holding the event kind (`xid`, `cuda`).
pub const KIND_KEY: &str = "gpuship.kind";

/// The schema of one event kind.
pub fn schema_for(kind: EventKind) -> Arc<Schema> {
    match kind {
        EventKind::Xid => xid::schema(),
        EventKind::Cuda => cuda::schema(),
        EventKind::Driver => driver::schema(),
        EventKind::CudaStats => cuda_stats::schema(),
        EventKind::CudaMemory => cuda_memory::schema(),
    }
}

/// The schema of one event kind as an Arrow IPC stream with no batches. The lake, on another
/// arrow version, reads these bytes from gpuship-model's copy (`gpuship_model::schemas`), which
/// the test below keeps equal to these schemas.
pub fn schema_ipc(kind: EventKind) -> Vec<u8> {
    let schema = schema_for(kind);
    let mut bytes = Vec::new();
    // Writing a schema into memory fails only for types IPC cannot carry; every kind's schema is
    // plain columns, and the unit test below writes and reads back each of them.
    let written = arrow_ipc::writer::StreamWriter::try_new(&mut bytes, &schema)
        .and_then(|mut writer| writer.finish());
    if let Err(err) = written {
        unreachable!("the {kind} schema cannot be written as Arrow IPC: {err}");
    }
    bytes
}

fn with_metadata(kind: EventKind, fields: Vec<arrow_schema::Field>) -> Arc<Schema> {
    let metadata: std::collections::HashMap<String, String> = [
        (SCHEMA_VERSION_KEY.to_string(), SCHEMA_VERSION.to_string()),
        (KIND_KEY.to_string(), kind.as_str().to_string()),
    ]
    .into_iter()
    .collect();
    Arc::new(Schema::new_with_metadata(fields, metadata))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kinds_schema_reads_back_from_its_ipc_bytes() {
        for &kind in EventKind::ALL {
            let bytes = schema_ipc(kind);
            let reader = arrow_ipc::reader::StreamReader::try_new(bytes.as_slice(), None)
                .unwrap_or_else(|e| panic!("{kind}: {e}"));
            assert_eq!(reader.schema(), schema_for(kind), "{kind}");
            assert_eq!(reader.count(), 0, "{kind}: no batches");
        }
    }

    /// The lake reads the schemas from gpuship-model's files (it does not link this crate):
    /// they must be these schemas. `GPUSHIP_WRITE_SCHEMAS=1` rewrites them first.
    #[test]
    fn schema_files_match_the_schemas() {
        let folder = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../model/schemas");
        let write = std::env::var_os("GPUSHIP_WRITE_SCHEMAS").is_some_and(|v| v == "1");
        for &kind in EventKind::ALL {
            let path = folder.join(gpuship_model::schemas::file_name(kind));
            if write {
                std::fs::write(&path, schema_ipc(kind)).unwrap();
            }
            // The file, not the bytes compiled into gpuship-model, so a rewrite is checked in
            // the same run; the compiled bytes are the file's unless it was just rewritten.
            let bytes = std::fs::read(&path).unwrap();
            if !write {
                assert_eq!(bytes, gpuship_model::schemas::schema_ipc(kind), "{kind}");
            }
            let reader = arrow_ipc::reader::StreamReader::try_new(bytes.as_slice(), None)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            assert_eq!(
                reader.schema(),
                schema_for(kind),
                "{}: out of date; rewrite it with GPUSHIP_WRITE_SCHEMAS=1 cargo test -p gpuship-sinks --lib schema_files",
                path.display()
            );
        }
    }
}
