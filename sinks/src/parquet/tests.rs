//! Tests of the Parquet sink against real files.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::UInt64Type;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::file::reader::{FileReader, SerializedFileReader};

use super::*;
use crate::schema::{CudaBatchBuilder, CudaRow};
use crate::sink::SinkInput;
use crate::stats::SinkStats;
use crate::test_support::{cuda_row, identity};
use crate::{EventBatch, EventKind};

fn cuda_batch(times_ns: &[i64]) -> arrow_array::RecordBatch {
    let mut builder = CudaBatchBuilder::new(identity(), times_ns.len());
    for (i, &time_ns) in times_ns.iter().enumerate() {
        builder.append(&CudaRow {
            time_ns,
            tid: 2,
            comm: "app",
            function: "cuMemAlloc_v2",
            duration_ns: 10,
            bytes: Some(i as u64),
            ..cuda_row()
        });
    }
    builder.finish().unwrap()
}

pub(super) fn parquet_files(root: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

fn read_bytes_column(path: &Path) -> Vec<u64> {
    let reader = ParquetRecordBatchReaderBuilder::try_new(File::open(path).unwrap())
        .unwrap()
        .build()
        .unwrap();
    reader
        .flat_map(|batch| {
            let batch = batch.unwrap();
            let col = batch
                .column_by_name("bytes")
                .unwrap()
                .as_primitive::<UInt64Type>()
                .clone();
            col.values().to_vec()
        })
        .collect()
}

const HOUR_NS: i64 = 3_600_000_000_000;

#[test]
fn batches_split_at_hour_boundaries_into_hive_partitions() {
    let dir = tempfile::tempdir().unwrap();
    let mut files = PartitionedFiles::new(ParquetSinkConfig::with_path(dir.path()), "node-a");
    let base = 1_795_320_000 * 1_000_000_000; // 2026-11-22T04:00:00Z
    let mut outcomes = files.write(
        EventKind::Cuda,
        &cuda_batch(&[base - 1, base, base + 1, base + HOUR_NS]),
    );
    // Each later hour's rows finalize the earlier hour's file at once.
    assert_eq!(finalized_rows(&outcomes), vec![1, 2]);
    assert_eq!(files.open_files(), 1);
    outcomes.extend(files.close_all());
    assert_eq!(finalized_rows(&outcomes), vec![1, 2, 1]);
    let found = parquet_files(dir.path());
    let relative: Vec<String> = found
        .iter()
        .map(|p| {
            p.parent()
                .unwrap()
                .strip_prefix(dir.path())
                .unwrap()
                .display()
                .to_string()
        })
        .collect();
    assert_eq!(
        relative,
        vec![
            "cuda/dt=2026-11-22/hour=03",
            "cuda/dt=2026-11-22/hour=04",
            "cuda/dt=2026-11-22/hour=05"
        ]
    );
    assert_eq!(read_bytes_column(&found[1]), vec![1, 2]);
    assert!(found
        .iter()
        .all(|p| !p.to_string_lossy().ends_with(TEMP_SUFFIX)));
}

fn finalized_rows(outcomes: &[FileOutcome]) -> Vec<u64> {
    outcomes
        .iter()
        .map(|o| match o {
            FileOutcome::Finalized { rows, .. } => *rows,
            FileOutcome::Rejected { error, .. } | FileOutcome::Failed { error, .. } => {
                panic!("{error}")
            }
        })
        .collect()
}

#[test]
fn a_later_hour_closes_earlier_hours_of_its_kind_only_and_late_rows_get_their_own_file() {
    let dir = tempfile::tempdir().unwrap();
    let mut files = PartitionedFiles::new(ParquetSinkConfig::with_path(dir.path()), "node-a");
    let base = 1_795_320_000 * 1_000_000_000; // 2026-11-22T04:00:00Z
    assert!(files
        .write(EventKind::Cuda, &cuda_batch(&[base - 2, base - 1]))
        .is_empty());
    assert!(files
        .write(
            EventKind::Driver,
            &crate::test_support::driver_batch(1).records
        )
        .is_empty());
    // The next hour's CUDA rows: the 03:00 CUDA file is finalized, the driver file (of an
    // earlier hour still) is not.
    let outcomes = files.write(EventKind::Cuda, &cuda_batch(&[base, base + 1]));
    assert_eq!(finalized_rows(&outcomes), vec![2]);
    assert!(matches!(
        &outcomes[0],
        FileOutcome::Finalized { kind: EventKind::Cuda, location, .. } if location.contains("hour=03")
    ));
    assert_eq!(files.open_files(), 2);
    // A late 03:00 row opens a file of its own; more 04:00 rows leave it open (no later hour
    // opened), rows of 05:00 finalize both earlier CUDA files, oldest first.
    assert!(files
        .write(EventKind::Cuda, &cuda_batch(&[base - 3]))
        .is_empty());
    assert!(files
        .write(EventKind::Cuda, &cuda_batch(&[base + 2]))
        .is_empty());
    assert_eq!(files.open_files(), 3);
    let outcomes = files.write(EventKind::Cuda, &cuda_batch(&[base + HOUR_NS]));
    assert_eq!(finalized_rows(&outcomes), vec![1, 3]);
    assert_eq!(files.open_files(), 2);
    let mut last = finalized_rows(&files.close_all());
    last.sort_unstable();
    assert_eq!(last, vec![1, 1], "the driver's file and CUDA's 05:00 file");
    assert_eq!(parquet_files(dir.path()).len(), 5);
}

#[test]
fn files_rotate_by_rows_and_carry_schema_metadata() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = ParquetSinkConfig::with_path(dir.path());
    config.max_file_rows = 3;
    let mut files = PartitionedFiles::new(config, "h");
    let t = 1_795_320_000 * 1_000_000_000;
    let mut finalized = 0;
    for _ in 0..4 {
        finalized += files.write(EventKind::Cuda, &cuda_batch(&[t, t])).len();
    }
    // 8 rows, rotated after every second batch (4 rows >= 3).
    assert_eq!(finalized, 2);
    assert_eq!(files.close_all().len(), 0);
    let found = parquet_files(dir.path());
    assert_eq!(found.len(), 2);
    let reader = SerializedFileReader::new(File::open(&found[0]).unwrap()).unwrap();
    let kv = reader
        .metadata()
        .file_metadata()
        .key_value_metadata()
        .unwrap();
    let get = |key: &str| {
        kv.iter()
            .find(|k| k.key == key)
            .and_then(|k| k.value.clone())
    };
    assert_eq!(get("gpuship.schema_version").as_deref(), Some("7"));
    assert_eq!(get("gpuship.kind").as_deref(), Some("cuda"));
    assert_eq!(reader.metadata().file_metadata().num_rows(), 4);
}

#[test]
fn unwritable_root_hands_every_row_back_for_a_retry() {
    let dir = tempfile::tempdir().unwrap();
    let blocker = dir.path().join("not-a-dir");
    std::fs::write(&blocker, b"x").unwrap();
    let mut files = PartitionedFiles::new(ParquetSinkConfig::with_path(&blocker), "h");
    // Files are encoded in memory: the disk is only touched when the file is complete.
    assert!(files
        .write(EventKind::Cuda, &cuda_batch(&[0, 1, 2]))
        .is_empty());
    let outcomes = files.close_all();
    assert_eq!(outcomes.len(), 1);
    match &outcomes[0] {
        FileOutcome::Rejected { batches, error, .. } => {
            // The encoded file was read back: the same rows, ready to retry.
            assert_eq!(batches.iter().map(|b| b.num_rows()).sum::<usize>(), 3);
            assert_eq!(batches[0], cuda_batch(&[0, 1, 2]));
            assert!(error.to_string().contains("creating directory"), "{error}");
        }
        other => panic!("expected failure, got {other:?}"),
    }
}

#[test]
fn sink_run_delivers_everything_when_input_closes() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let stats = Arc::new(SinkStats::default());
    let (tx, rx) = crate::queue(crate::BufferConfig::default(), stats.clone());
    let sink = Box::new(ParquetSink::new(
        "lake",
        ParquetSinkConfig::with_path(dir.path()),
        "h",
    ));
    let input = SinkInput {
        batches: rx,
        stats: stats.clone(),
    };
    let t = 1_795_320_000 * 1_000_000_000;
    let task = runtime.spawn(sink.run(input));
    // Producers are plain threads, as in the agent.
    std::thread::spawn(move || {
        for _ in 0..5 {
            tx.send_blocking(EventBatch::new(
                EventKind::Cuda,
                cuda_batch(&[t, t + 1, t + 2]),
            ));
        }
    })
    .join()
    .unwrap();
    runtime.block_on(task).unwrap().unwrap();
    assert_eq!(stats.received.get(EventKind::Cuda), 15);
    assert_eq!(stats.delivered.get(EventKind::Cuda), 15);
    assert_eq!(stats.in_flight(EventKind::Cuda), 0);
    let found = parquet_files(dir.path());
    assert_eq!(found.len(), 1);
    assert_eq!(
        read_bytes_column(&found[0]),
        vec![0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2]
    );
}

#[test]
fn config_problems_name_each_bad_key() {
    let mut config = ParquetSinkConfig::with_path("");
    config.zstd_level = 40;
    config.max_file_rows = 0;
    let keys: Vec<&str> = config.problems().into_iter().map(|(k, _)| k).collect();
    assert_eq!(keys, vec!["path", "zstd_level", "max_file_rows"]);
}

#[test]
fn an_xid_file_is_finalized_within_its_short_age_while_cuda_files_stay_open() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let stats = Arc::new(SinkStats::default());
    let (tx, rx) = crate::queue(crate::BufferConfig::default(), stats.clone());
    let config = ParquetSinkConfig {
        xid_max_file_age_ms: 200,
        ..ParquetSinkConfig::with_path(dir.path())
    };
    let sink = Box::new(ParquetSink::new("lake", config, "h"));
    let input = SinkInput {
        batches: rx,
        stats: stats.clone(),
    };
    let task = runtime.spawn(sink.run(input));
    let t = 1_795_320_000 * 1_000_000_000;
    tx.send_blocking(EventBatch::new(EventKind::Cuda, cuda_batch(&[t])));
    tx.send_blocking(crate::test_support::xid_batch());
    // While the agent runs: the XID reaches the lake, the CUDA file (300 s) does not.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while stats.delivered.get(EventKind::Xid) == 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(stats.delivered.get(EventKind::Xid), 1);
    assert_eq!(stats.delivered.get(EventKind::Cuda), 0);
    let found = parquet_files(dir.path());
    assert_eq!(found.len(), 1);
    assert!(found[0].starts_with(dir.path().join("xid")), "{found:?}");
    drop(tx);
    runtime.block_on(task).unwrap().unwrap();
    assert_eq!(stats.delivered.get(EventKind::Cuda), 1);
    assert_eq!(parquet_files(dir.path()).len(), 2);
}

#[test]
fn xid_file_age_has_a_range() {
    let mut config = ParquetSinkConfig::with_path("lake");
    config.xid_max_file_age_ms = 0;
    let keys: Vec<&str> = config.problems().into_iter().map(|(k, _)| k).collect();
    assert_eq!(keys, vec!["xid_max_file_age_ms"]);
    config.xid_max_file_age_ms = u64::MAX;
    assert_eq!(config.problems().len(), 1);
    config.xid_max_file_age_ms = 10;
    assert!(config.problems().is_empty());
}

#[test]
fn a_file_past_its_first_row_group_has_room_for_the_whole_file() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = ParquetSinkConfig::with_path(dir.path());
    config.row_group_bytes = 1;
    config.max_file_bytes = 3 << 20;
    let mut files = PartitionedFiles::new(config, "h");
    let t = 1_795_320_000 * 1_000_000_000;
    assert!(files
        .write(EventKind::Cuda, &cuda_batch(&[t, t]))
        .is_empty());
    assert_eq!(files.buffer_capacities(), vec![(3 << 20) + 1]);
    // The rows still make a readable file.
    assert_eq!(files.close_all().len(), 1);
    assert_eq!(read_bytes_column(&parquet_files(dir.path())[0]), vec![0, 1]);
}

#[test]
fn the_room_reserved_for_a_file_is_bounded() {
    let mut config = ParquetSinkConfig::with_path(Path::new("/nonexistent"));
    config.max_file_bytes = usize::MAX;
    let mut buffer = vec![0u8; 10];
    file_buffer::reserve_whole_file(&mut buffer, &config);
    assert_eq!(buffer.capacity(), file_buffer::MAX_RESERVED_FILE_BYTES);
    // Enough room already: nothing changes.
    config.max_file_bytes = 4;
    config.row_group_bytes = 4;
    file_buffer::reserve_whole_file(&mut buffer, &config);
    assert_eq!(buffer.capacity(), file_buffer::MAX_RESERVED_FILE_BYTES);
}
