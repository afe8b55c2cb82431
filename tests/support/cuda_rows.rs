//! `cuda` table rows as the CUDA capture tests compare them.

use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, UInt32Type, UInt64Type};
use arrow_array::{Array, RecordBatch};

/// One call as the tests compare it: the function, its result and its decoded arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    pub function: String,
    pub result: u32,
    pub result_name: String,
    pub bytes: Option<u64>,
    pub device_ptr: Option<u64>,
    pub stream: Option<u64>,
    pub launch: Option<[u32; 7]>,
}

/// One `cuda` row: who called, when, for how long, and the call.
pub struct Row {
    pub time_ns: i64,
    pub pid: i32,
    pub tid: i32,
    pub comm: String,
    pub duration_ns: u64,
    pub call: Call,
}

/// The rows of `cuda` batches, in time order.
pub fn rows(batches: &[RecordBatch]) -> Vec<Row> {
    let mut rows = Vec::new();
    for batch in batches {
        let col = |name: &str| {
            batch
                .column_by_name(name)
                .unwrap_or_else(|| panic!("no column {name}"))
        };
        let u64_opt = |name: &str, i: usize| {
            let a = col(name).as_primitive::<UInt64Type>();
            (!a.is_null(i)).then(|| a.value(i))
        };
        let u32_at = |name: &str, i: usize| {
            let a = col(name).as_primitive::<UInt32Type>();
            (!a.is_null(i)).then(|| a.value(i))
        };
        for i in 0..batch.num_rows() {
            let dims = [
                "grid_x",
                "grid_y",
                "grid_z",
                "block_x",
                "block_y",
                "block_z",
                "shared_mem_bytes",
            ]
            .map(|name| u32_at(name, i));
            let launch = dims
                .iter()
                .all(Option::is_some)
                .then(|| dims.map(|d| d.unwrap_or_default()));
            assert!(
                launch.is_some() || dims.iter().all(Option::is_none),
                "partial launch dims"
            );
            rows.push(Row {
                time_ns: col("time_ns")
                    .as_primitive::<arrow_array::types::Int64Type>()
                    .value(i),
                pid: col("pid").as_primitive::<Int32Type>().value(i),
                tid: col("tid").as_primitive::<Int32Type>().value(i),
                comm: col("comm").as_string::<i32>().value(i).to_string(),
                duration_ns: col("duration_ns").as_primitive::<UInt64Type>().value(i),
                call: Call {
                    function: col("function").as_string::<i32>().value(i).to_string(),
                    result: col("result").as_primitive::<UInt32Type>().value(i),
                    result_name: col("result_name").as_string::<i32>().value(i).to_string(),
                    bytes: u64_opt("bytes", i),
                    device_ptr: u64_opt("device_ptr", i),
                    stream: u64_opt("stream", i),
                    launch,
                },
            });
        }
    }
    rows.sort_by_key(|r| r.time_ns);
    rows
}
