//! Fetch chunks and the sort order of compacted rows.

use super::*;
use arrow_array::{Int64Array, StringArray};
use arrow_schema::{DataType, Field, Schema};

#[test]
fn files_are_fetched_in_bounded_chunks_in_order() {
    let group = |host: &str, sizes: &[u64]| HostGroup {
        host: host.into(),
        files: sizes
            .iter()
            .enumerate()
            .map(|(i, s)| (format!("{host}{i}"), *s))
            .collect(),
    };
    let groups = vec![group("a", &[10; 40]), group("b", &[FETCH_BYTES, 1])];
    let chunks = fetch_chunks(&groups);
    let lens: Vec<usize> = chunks.iter().map(Vec::len).collect();
    assert_eq!(
        lens,
        [32, 8, 1, 1],
        "32 files, then the rest of a; b0 alone by size"
    );
    assert_eq!(chunks[1][7], (0, "a39"));
    assert_eq!(chunks[2], [(1, "b0")]);
    assert_eq!(chunks[3], [(1, "b1")]);
}

#[test]
fn rows_sort_by_host_then_time() {
    let schema = Arc::new(Schema::new(vec![
        Field::new("host", DataType::Utf8, false),
        Field::new("time_ns", DataType::Int64, false),
    ]));
    let batch = RecordBatch::try_new(
        schema,
        vec![
            Arc::new(StringArray::from(vec!["b", "a", "b", "a"])),
            Arc::new(Int64Array::from(vec![2, 9, 1, 3])),
        ],
    )
    .unwrap();
    let sorted = sort_rows(&batch).unwrap();
    let hosts = sorted
        .column(0)
        .as_any()
        .downcast_ref::<StringArray>()
        .unwrap();
    let times = sorted
        .column(1)
        .as_any()
        .downcast_ref::<Int64Array>()
        .unwrap();
    assert_eq!(
        hosts.iter().flatten().collect::<Vec<_>>(),
        ["a", "a", "b", "b"]
    );
    assert_eq!(times.values(), &[3, 9, 1, 2]);
}
