//! `gpuship-lake compact` on an S3-compatible store (moto's server): the same rows before,
//! while it is stopped in the middle of a multipart upload or after its commit, after a SIGKILL
//! there and after the rerun, through gpuship's readers and DuckDB's httpfs; the bucket ends
//! with one compacted file and one marker per closed hour, the open hour's objects untouched,
//! and an Iceberg table per kind that holds the closed hours once.

use std::sync::Arc;

use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};

use super::fixture::{compact, duckdb_sums, lake_sums, lake_sums_with, stderr, write_lake};
use super::phases::paused_at;
use crate::support::lake::duckdb_s3;
use crate::support::peers::Moto;

pub(super) const BUCKET: &str = "gpu-lake";

pub(super) fn env(moto: &Moto) -> Vec<(&'static str, String)> {
    vec![
        ("AWS_ACCESS_KEY_ID", "test".into()),
        ("AWS_SECRET_ACCESS_KEY", "test".into()),
        ("AWS_REGION", "us-east-1".into()),
        ("AWS_ENDPOINT", moto.endpoint()),
        ("AWS_ALLOW_HTTP", "true".into()),
    ]
}

/// Uploads every file under `root` to `s3://gpu-lake/fleet/`.
pub(super) fn upload(moto: &Moto, root: &std::path::Path) {
    let store: Arc<dyn ObjectStore> = Arc::new(
        object_store::aws::AmazonS3Builder::new()
            .with_bucket_name(BUCKET)
            .with_endpoint(moto.endpoint())
            .with_allow_http(true)
            .with_virtual_hosted_style_request(false)
            .with_access_key_id("test")
            .with_secret_access_key("test")
            .with_region("us-east-1")
            .build()
            .expect("S3 client"),
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            let key = format!("fleet/{}", path.strip_prefix(root).unwrap().display());
            let data = PutPayload::from(std::fs::read(&path).unwrap());
            runtime
                .block_on(store.put(&ObjectPath::from(key), data))
                .expect("upload");
        }
    }
}

/// A lake of two closed hours and the open one on moto; `gpuship-lake compact` paused at
/// `phase`, read, SIGKILLed, read, rerun; the bucket then holds one compacted file and one
/// marker per closed hour, the open hour as it was, and every row once.
fn killed_on_s3_at(phase: &str) {
    let moto = Moto::start(0);
    moto.create_bucket(BUCKET);
    let dir = tempfile::tempdir().expect("tempdir");
    write_lake(dir.path(), 3, &[4, 3, 0], 2, 20);
    upload(&moto, dir.path());
    let env = env(&moto);
    let data = format!("s3://{BUCKET}/fleet");
    let endpoint = format!("127.0.0.1:{}", moto.port);
    let glob_root = format!("s3://{BUCKET}/fleet");
    let before = lake_sums(&data, &env);
    assert_eq!(before[0][0], 3 * 3 * 2 * 20);
    assert_eq!(
        duckdb_sums(&glob_root, |sql: &str| duckdb_s3(&endpoint, sql)),
        before
    );
    let open: Vec<String> = moto
        .keys(BUCKET)
        .into_iter()
        .filter(|k| k.contains(&hour_of(0)))
        .collect();
    assert_eq!(open.len(), 3 * 2 * 2, "{open:?}");

    // Parts of 4 KiB put a file in the middle of a multipart upload at `writing` (S3 would
    // refuse to complete one of parts that small; it is killed first).
    let parts: &[&str] = match phase {
        "writing" => &["--upload-part-bytes", "4096"],
        _ => &[],
    };
    let mut child = paused_at(&data, phase, parts, &env);
    if phase == "writing" {
        let (status, uploads) = crate::support::metrics::http(
            &endpoint,
            &format!(
                "GET /{BUCKET}?uploads HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
            ),
        );
        assert!(status == 200 && uploads.contains("<UploadId>"), "{uploads}");
        let keys = moto.keys(BUCKET);
        assert!(!keys.iter().any(|k| k.contains("/compact-")), "{keys:?}");
    }
    assert_eq!(lake_sums(&data, &env), before, "a reader paused at {phase}");
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(lake_sums(&data, &env), before, "a reader after the kill");

    let rerun = compact(&data, &["--retire-after", "0s"], &env);
    assert!(rerun.status.success(), "{}", stderr(&rerun));
    let keys = moto.keys(BUCKET);
    for table in ["cuda", "xid"] {
        for ago in [4, 3] {
            let folder = format!("fleet/{table}/{}/", hour_of(ago));
            let names: Vec<&str> = keys
                .iter()
                .filter_map(|k| k.strip_prefix(&folder))
                .collect();
            assert!(
                names.len() == 2
                    && names[0].starts_with("_compaction-")
                    && names[1].starts_with("compact-"),
                "{folder}: {names:?}"
            );
        }
    }
    let open_after: Vec<String> = keys
        .into_iter()
        .filter(|k| k.contains(&hour_of(0)))
        .collect();
    assert_eq!(open_after, open, "the open hour is untouched");
    assert_eq!(lake_sums(&data, &env), before, "after the rerun");
    assert_eq!(
        duckdb_sums(&glob_root, |sql: &str| duckdb_s3(&endpoint, sql)),
        before
    );
    // The Iceberg tables on S3 (metadata written with If-None-Match): the closed hours, once.
    let keys = moto.keys(BUCKET);
    for table in ["cuda", "xid"] {
        for name in ["v1.metadata.json", "version-hint.text"] {
            let key = format!("fleet/iceberg/{table}/metadata/{name}");
            assert!(keys.contains(&key), "{key} missing: {keys:?}");
        }
    }
    let tables = lake_sums_with(&data, &env, &["--iceberg"]);
    assert_eq!((tables[0][0], tables[1][0]), (3 * 2 * 2 * 20, 3 * 2 * 2));
}

#[test]
fn killed_on_s3_in_the_middle_of_a_multipart_upload() {
    killed_on_s3_at("writing");
}

#[test]
fn killed_on_s3_after_a_commit() {
    killed_on_s3_at("committed");
}

/// `dt=YYYY-MM-DD/hour=HH` of the hour `hours_ago` hours before the current one.
fn hour_of(hours_ago: i64) -> String {
    let start = chrono::DateTime::from_timestamp_nanos(super::fixture::hour_start(hours_ago));
    format!(
        "dt={}/hour={}",
        start.format("%Y-%m-%d"),
        start.format("%H")
    )
}
