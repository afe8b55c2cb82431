//! The views (`export-trace`, `report`) over lakes that are not what they should be: special
//! files named like data (a FIFO `part-x.parquet` once made `export-trace` wait forever), files
//! the reader may not read, and ranges with no file at all, which must be a loud, distinct
//! outcome (exit status 3) rather than a page that looks like a quiet, healthy fleet.
//! The lakes are written here directly, without an agent.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::support;
use crate::support::agent::binary;
use gpuship_sinks::schema::{CudaBatchBuilder, CudaRow};
use gpuship_sinks::test_support::{cuda_row, host_identity};
use parquet::arrow::ArrowWriter;

/// The distinct exit status of a view that found no data (docs/views.md).
const NO_DATA: i32 = 3;

/// A `cuda` file of `calls` calls one minute ago, in its hour partition under `lake`; returns
/// that partition's folder.
fn write_calls(lake: &Path, calls: usize) -> PathBuf {
    let when = chrono::Utc::now() - chrono::Duration::minutes(1);
    let folder = lake.join(format!(
        "cuda/dt={}/hour={}",
        when.format("%Y-%m-%d"),
        when.format("%H")
    ));
    std::fs::create_dir_all(&folder).unwrap();
    let mut builder = CudaBatchBuilder::new(host_identity("node-v", "boot"), calls);
    let time_ns = when.timestamp_nanos_opt().unwrap();
    for i in 0..calls {
        builder.append(&CudaRow {
            time_ns: time_ns + i as i64 * 1_000,
            pid: 77,
            tid: 77,
            comm: "train",
            function: "cuMemAlloc_v2",
            duration_ns: 500,
            bytes: Some(4096),
            device_ptr: Some(0x1000),
            ..cuda_row()
        });
    }
    let batch = builder.finish().unwrap();
    let file = std::fs::File::create(folder.join("part-node-v-good.parquet")).unwrap();
    let mut writer = ArrowWriter::try_new(file, batch.schema(), None).unwrap();
    writer.write(&batch).unwrap();
    writer.close().unwrap();
    folder
}

fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path; mkfifo has no other memory effects.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o666) }, 0);
}

/// Runs a view to its end, as `uid` when given. A view that blocks is killed after a minute and
/// fails the test (the defect this file is about was a wait without end).
fn view(args: &[&str], uid: Option<u32>) -> Output {
    let mut command = Command::new(binary());
    command
        .args(args)
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(uid) = uid {
        command.uid(uid).gid(uid);
    }
    let mut child = command.spawn().expect("view");
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("gpuship {args:?} blocked: {:?}", child.wait_with_output());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().expect("output")
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn special_and_unreadable_files_are_named_and_skipped_never_waited_on() {
    let dir = tempfile::tempdir().unwrap();
    let lake = dir.path().join("lake");
    let folder = write_calls(&lake, 5);
    mkfifo(&folder.join("part-x.parquet"));
    let secret = folder.join("part-secret.parquet");
    // A good file too (the same rows again), that only root may read.
    std::fs::copy(folder.join("part-node-v-good.parquet"), &secret).unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o000)).unwrap();
    // The views run as `nobody`, for whom a 0000 file is unreadable (root reads anything).
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    for path in support::lake::files(dir.path())
        .iter()
        .chain([dir.path().to_path_buf()].iter())
    {
        let mut folder = path.parent();
        while let Some(f) = folder.filter(|f| f.starts_with(dir.path())) {
            std::fs::set_permissions(f, std::fs::Permissions::from_mode(0o777)).unwrap();
            folder = f.parent();
        }
    }
    std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o777)).unwrap();
    let data = lake.display().to_string();
    let nobody = Some(65534);

    let trace = view(
        &["export-trace", "--since", "1h", "--data", &data, "-o", "-"],
        nobody,
    );
    let text = stderr(&trace);
    assert!(trace.status.success(), "{text}");
    for named in [
        "part-x.parquet: not a regular file (a FIFO); skipped",
        "part-secret.parquet",
        "Permission denied",
        "2 file(s) could not be read and were skipped",
    ] {
        assert!(text.contains(named), "{named:?} in {text}");
    }
    let document: serde_json::Value = serde_json::from_slice(&trace.stdout).unwrap();
    let calls = document["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["name"] == "cuMemAlloc_v2")
        .count();
    assert_eq!(calls, 5, "the readable file's rows are all there");

    let page = out.join("report.html");
    let page_arg = page.display().to_string();
    let report = view(
        &["report", "--since", "1h", "--data", &data, "-o", &page_arg],
        nobody,
    );
    let text = stderr(&report);
    assert!(report.status.success(), "{text}");
    assert!(text.contains("5 CUDA calls"), "{text}");
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains("2 file(s) could not be read"), "{html}");
    assert!(
        html.contains("part-x.parquet</code>: "),
        "the page names the FIFO"
    );
    assert!(html.contains("part-secret.parquet</code>: "));

    // Root reads the 0000 file; the FIFO is still never opened.
    let trace = view(
        &["export-trace", "--since", "1h", "--data", &data, "-o", "-"],
        None,
    );
    let text = stderr(&trace);
    assert!(trace.status.success(), "{text}");
    assert!(text.contains("1 file(s) could not be read"), "{text}");
    assert!(text.contains("10 CUDA calls"), "{text}");
}

#[test]
fn a_range_without_data_files_is_a_loud_distinct_outcome_of_every_view() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    // Only a FIFO where the data should be: nothing readable either.
    let fifo_only = dir.path().join("fifo-only");
    let folder = write_calls(&fifo_only, 1);
    std::fs::remove_file(folder.join("part-node-v-good.parquet")).unwrap();
    mkfifo(&folder.join("part-x.parquet"));
    // Files exist, but an hour before the range: pruned, so nothing in the range.
    let earlier = dir.path().join("earlier");
    write_calls(&earlier, 3);

    for (lake, since, until) in [
        (&empty, "1h", None),
        (&fifo_only, "1h", None),
        (&earlier, "1h", Some("30s")),
    ] {
        let data = lake.display().to_string();
        for (view_name, output) in [
            ("export-trace", dir.path().join("trace.json")),
            ("report", dir.path().join("report.html")),
        ] {
            let output_arg = output.display().to_string();
            let mut args = vec![view_name, "--since", since, "--data", &data];
            args.extend(["-o", &output_arg]);
            let until_arg;
            if let Some(until) = until {
                // `--until 30s`: up to 30 s ago, and the rows are a minute old: the file's
                // hour is listed and read, its rows filtered out. Files exist, rows do not:
                // that is data (an idle range), not "no data".
                until_arg = until.to_string();
                args.extend(["--until", &until_arg]);
            }
            let run = view(&args, None);
            let text = stderr(&run);
            if until.is_some() {
                assert!(run.status.success(), "{view_name}: {text}");
                assert!(output.exists());
                std::fs::remove_file(&output).unwrap();
                continue;
            }
            assert_eq!(run.status.code(), Some(NO_DATA), "{view_name}: {text}");
            assert!(
                text.contains(&format!(
                    "gpuship {view_name}: NO DATA: no readable Parquet file in {data}"
                )),
                "{text}"
            );
            assert!(text.contains("AWS_ENDPOINT_URL"), "{text}");
            assert!(!output.exists(), "{view_name} wrote {}", output.display());
            if lake == &fifo_only {
                assert!(text.contains("part-x.parquet"), "{text}");
            }
        }
    }
}
