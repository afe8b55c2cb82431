//! Tests of the lake reader: ranges read with a corrupt file skipped, folds over several plans, the accounting documents summed, storage it refuses to open.

use super::*;
use arrow_array::cast::AsArray;
use chrono::{DateTime, Utc};

const BASE_NS: i64 = 1_795_319_000_000_000_000; // 2026-11-22T03:43:20Z

fn put(root: &Path, key: &str, data: &[u8]) {
    let path = root.join(key);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, data).unwrap();
}

fn range(minutes_before: i64, minutes_after: i64) -> TimeRange {
    let base = DateTime::<Utc>::from_timestamp_nanos(BASE_NS);
    TimeRange::new(
        base - chrono::Duration::minutes(minutes_before),
        base + chrono::Duration::minutes(minutes_after),
    )
    .unwrap()
}

#[test]
fn reads_the_range_and_reports_a_corrupt_file_without_failing() {
    let dir = tempfile::tempdir().unwrap();
    let hour3 = "cuda/dt=2026-11-22/hour=03";
    let good = table::tests::cuda_file(&[BASE_NS, BASE_NS + 1_000_000_000]);
    put(dir.path(), &format!("{hour3}/part-a.parquet"), &good);
    put(
        dir.path(),
        &format!("{hour3}/part-bad.parquet"),
        b"PAR1 garbage",
    );
    // Hidden, being written: never opened even though it is garbage.
    put(
        dir.path(),
        &format!("{hour3}/.part-c.parquet.inprogress"),
        b"x",
    );
    // An hour outside the range: pruned by its folder, so its garbage is never read.
    put(
        dir.path(),
        "cuda/dt=2026-11-22/hour=07/part-d.parquet",
        b"x",
    );
    let lake = Lake::open(&dir.path().display().to_string()).unwrap();

    let read = lake.read_table(EventKind::Cuda, &range(10, 10)).unwrap();
    assert_eq!(read.rows(), 2);
    assert_eq!((read.files_read, read.files_pruned), (1, 1));
    assert_eq!(read.files_ignored, 1);
    assert_eq!(read.unreadable.len(), 1);
    assert_eq!(
        read.unreadable[0].key,
        "cuda/dt=2026-11-22/hour=03/part-bad.parquet"
    );
    assert!(
        read.unreadable[0].error.contains("Parquet"),
        "{:?}",
        read.unreadable
    );
    // The plain read returns the good rows too.
    let batches = lake.read(EventKind::Cuda, &range(10, 10)).unwrap();
    assert_eq!(table::row_count(&batches), 2);
    // Rows are filtered by time inside the files the partitions keep.
    let narrow = TimeRange::new(
        DateTime::<Utc>::from_timestamp_nanos(BASE_NS + 500_000_000),
        DateTime::<Utc>::from_timestamp_nanos(BASE_NS + 2_000_000_000),
    )
    .unwrap();
    assert_eq!(lake.read_table(EventKind::Cuda, &narrow).unwrap().rows(), 1);
    // Other tables and other days are empty, not errors.
    assert_eq!(
        lake.read_table(EventKind::Xid, &range(10, 10))
            .unwrap()
            .rows(),
        0
    );
}

/// A fold over several plans sees every row once, a damaged file found on the way starts
/// it over without the file, and the table keeps all its files for the next query.
#[test]
fn a_fold_over_several_plans_counts_every_row_once() {
    let dir = tempfile::tempdir().unwrap();
    let hour3 = "cuda/dt=2026-11-22/hour=03";
    for file in 0..5i64 {
        let times: Vec<i64> = (0..3).map(|i| BASE_NS + file * 10_000 + i).collect();
        let data = table::tests::cuda_file(&times);
        put(dir.path(), &format!("{hour3}/part-{file}.parquet"), &data);
    }
    // Opens (its footer is sound) but fails inside, so only a read finds it.
    let good = table::tests::cuda_file(&[BASE_NS + 99]);
    let mut damaged = good.clone();
    let footer_len = u32::from_le_bytes(good[good.len() - 8..good.len() - 4].try_into().unwrap());
    let footer_start = good.len() - 8 - footer_len as usize;
    damaged[4..footer_start].fill(0xff);
    put(
        dir.path(),
        &format!("{hour3}/part-9-damaged.parquet"),
        &damaged,
    );
    let lake = Lake::open(&dir.path().display().to_string()).unwrap();
    let mut read = lake.tables(&[EventKind::Cuda], &range(10, 10)).unwrap();

    let times = read
        .fold_with(
            2,
            crate::engine::Decoding::default(),
            EventKind::Cuda,
            "SELECT time_ns FROM cuda",
            Vec::new,
            |times, batch| {
                let column = batch
                    .column(0)
                    .as_primitive::<arrow_array::types::Int64Type>();
                times.extend(column.values().iter().copied());
            },
        )
        .unwrap();
    let mut sorted = times.clone();
    sorted.sort_unstable();
    let expected: Vec<i64> = (0..5i64)
        .flat_map(|file| (0..3).map(move |i| BASE_NS + file * 10_000 + i))
        .collect();
    assert_eq!(
        sorted, expected,
        "each row once, the damaged file's row left out"
    );
    let unreadable = read.unreadable();
    assert_eq!(unreadable.len(), 1, "{unreadable:?}");
    assert_eq!(unreadable[0].key, format!("{hour3}/part-9-damaged.parquet"));
    // The next query sees the whole table again, not the last plan's files.
    let count = read.query("SELECT count(*) AS n FROM cuda").unwrap();
    let n = count[0]
        .column(0)
        .as_primitive::<arrow_array::types::Int64Type>();
    assert_eq!(n.value(0), 15);
}

#[test]
fn accounting_sums_the_documents_and_says_when_there_are_none() {
    let dir = tempfile::tempdir().unwrap();
    let lake = Lake::open(&dir.path().display().to_string()).unwrap();
    let none = lake.accounting(&range(10, 10)).unwrap();
    assert_eq!(none.documents, 0);
    let doc = serde_json::json!({
        "accounting": {
            "rings": [{"ring": "cuda", "emitted": 5, "lost_in_kernel": 1}],
            "sinks": [{"sink": "parquet", "kind": "cuda", "delivered": 4, "dropped": 0,
                       "dropped_by_reason": {"buffer_full": 0}}]
        }
    });
    put(
        dir.path(),
        "_accounting/run.json",
        doc.to_string().as_bytes(),
    );
    put(dir.path(), "_accounting/.run2.json.tmp", b"partial");
    let totals = lake.accounting(&range(10, 10)).unwrap();
    assert_eq!(totals.documents, 1);
    assert_eq!(totals.delivered(), 4);
    assert_eq!(totals.lost_in_kernel(), 1);
    assert!(totals.unreadable.is_empty());
}

#[test]
fn open_refuses_what_it_cannot_read() {
    let err = Lake::open("gs://bucket/prefix").unwrap_err();
    assert!(err.to_string().contains("not supported"), "{err}");
    let err = Lake::open("s3://B/prefix").unwrap_err();
    assert!(err.to_string().contains("bucket name"), "{err}");
    let err = Lake::open("/nonexistent/gpuship-data").unwrap_err();
    assert!(format!("{err:#}").contains("--data"), "{err:#}");
}
