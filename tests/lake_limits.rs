//! The lake commands within their limits, on the real `gpuship-lake` binary: a sparse 50 GB
//! `part-x.parquet` (and a 3 GB one with a plausible footer) is skipped with a warning naming
//! it (never allocated), an unbounded recursive query ends at `--timeout`,
//! `repeat('x', 2000000000)` fails under `--memory-limit 256MiB` with a clear error and peak
//! memory under the limit; stderr in a file carries no colour codes (docs/views.md, "Limits").

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::agent::binary;

/// What a run left: exit status, stderr, peak resident memory (VmHWM, KiB) and how long.
struct Run {
    code: Option<i32>,
    stderr: String,
    peak_kib: u64,
    took: Duration,
}

fn lake_binary() -> PathBuf {
    Path::new(binary()).with_file_name("gpuship-lake")
}

fn vm_hwm_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Runs `program args` with stderr to a file (not a terminal) and no NO_COLOR, polling its
/// peak memory until it exits (killed after a minute: a limit that does not hold fails here).
fn run(program: &Path, args: &[&str]) -> Run {
    let dir = tempfile::tempdir().expect("a temp dir");
    let stderr_path = dir.path().join("stderr");
    let started = Instant::now();
    let mut child = Command::new(program)
        .args(args)
        .env_remove("NO_COLOR")
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(File::create(&stderr_path).expect("a stderr file"))
        .spawn()
        .expect("the binary starts");
    let mut peak_kib = 0;
    let status = loop {
        if let Some(kib) = vm_hwm_kib(child.id()) {
            peak_kib = peak_kib.max(kib);
        }
        if let Some(status) = child.try_wait().expect("waiting for it") {
            break status;
        }
        if started.elapsed() > Duration::from_secs(60) {
            child.kill().expect("killing it");
            child.wait().expect("reaping it");
            panic!("{} {args:?} ran over a minute", program.display());
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    Run {
        code: status.code(),
        stderr: std::fs::read_to_string(&stderr_path).expect("its stderr"),
        peak_kib,
        took: started.elapsed(),
    }
}

/// An empty lake with the current hour's folder of `cuda`.
fn lake_with_hour() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("a temp dir");
    let now = chrono::Utc::now();
    let hour = dir.path().join(format!(
        "cuda/dt={}/hour={}",
        now.format("%Y-%m-%d"),
        now.format("%H")
    ));
    std::fs::create_dir_all(&hour).expect("the hour folder");
    (dir, hour)
}

fn query(data: &Path, sql: &str, extra: &[&str]) -> Run {
    let data = data.to_str().expect("a UTF-8 temp path");
    let mut args = vec!["query", sql, "--since", "1h", "--data", data];
    args.extend_from_slice(extra);
    run(&lake_binary(), &args)
}

#[test]
fn sparse_50_gb_and_3_gb_files_and_a_lying_footer_are_skipped_by_name_without_reading_them() {
    let (lake, hour) = lake_with_hour();
    File::create(hour.join("part-x.parquet"))
        .and_then(|f| f.set_len(50 << 30))
        .expect("a sparse 50 GB file");
    // 2 MiB whose footer claims 4 GiB of metadata.
    let mut lying = vec![0u8; 2 << 20];
    let end = lying.len();
    lying[end - 8..end - 4].copy_from_slice(&0xffff_fff0u32.to_le_bytes());
    lying[end - 4..].copy_from_slice(b"PAR1");
    std::fs::write(hour.join("part-y.parquet"), &lying).expect("a lying file");
    // 3 GB, sparse, whose footer looks sound (100 bytes, PAR1) but holds zeros: the engine
    // finds it, and the check after the failed read must not load it whole.
    let z = File::create(hour.join("part-z.parquet")).expect("a sparse 3 GB file");
    z.set_len(3 << 30).expect("3 GB");
    let mut footer = 100u32.to_le_bytes().to_vec();
    footer.extend_from_slice(b"PAR1");
    std::os::unix::fs::FileExt::write_all_at(&z, &footer, (3 << 30) - 8).expect("its footer");

    let run = query(lake.path(), "SELECT count(*) FROM cuda", &[]);
    assert_eq!(
        run.code,
        Some(3),
        "no readable file: NO DATA\n{}",
        run.stderr
    );
    let x = format!(
        "{}/part-x.parquet: not a Parquet file: the last 4 of its 53687091200 bytes are not \
         PAR1 (garbage, or a sparse or truncated file)",
        hour.strip_prefix(lake.path()).unwrap().display()
    );
    assert!(run.stderr.contains(&x), "{}", run.stderr);
    assert!(
        run.stderr.contains(
            "part-y.parquet: damaged Parquet footer: it claims 4294967280 bytes of metadata, \
             more than the 2097152-byte file holds"
        ),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("part-z.parquet: Parquet error"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains(
            "gpuship query: 3 file(s) could not be read and were skipped; their rows are missing:"
        ),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains(" WARN "), "{}", run.stderr);
    assert!(
        !run.stderr.contains('\x1b'),
        "no colour codes in a file: {:?}",
        run.stderr
    );
    assert!(run.peak_kib < 256 * 1024, "peak {} KiB", run.peak_kib);
}

#[test]
fn an_unbounded_recursive_query_ends_at_the_timeout() {
    let (lake, _hour) = lake_with_hour();
    let run = query(
        lake.path(),
        "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT count(*) FROM r",
        &["--timeout", "2s"],
    );
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    assert_eq!(
        run.stderr.trim_end(),
        "gpuship-lake: gpuship query: time limit reached: stopped after --timeout 2s (the query \
         did not finish; narrow it, or raise --timeout)"
    );
    assert!(
        run.took >= Duration::from_secs(2) && run.took < Duration::from_secs(20),
        "{:?}",
        run.took
    );
    assert!(!run.stderr.contains('\x1b'), "{:?}", run.stderr);
}

#[test]
fn a_two_gigabyte_string_fails_under_the_memory_limit_without_allocating_it() {
    let (lake, _hour) = lake_with_hour();
    for sql in [
        "SELECT length(repeat('x', 2000000000)) AS n",
        "SELECT length(lpad('x', 2000000000)) AS n",
    ] {
        let run = query(lake.path(), sql, &["--memory-limit", "256MiB"]);
        assert_eq!(run.code, Some(1), "{sql}: {}", run.stderr);
        let function = if sql.contains("repeat") {
            "repeat() would build a 1.9 GiB"
        } else {
            "lpad() would build a 7.5 GiB"
        };
        assert_eq!(
            run.stderr.trim_end(),
            format!(
                "gpuship-lake: gpuship query: memory limit reached: {function} string, more \
                 than the memory limit (256.0 MiB, --memory-limit) has room for"
            )
        );
        assert!(
            run.peak_kib < (256 + 128) * 1024,
            "{sql}: peak {} KiB",
            run.peak_kib
        );
    }
    // Through the agent's binary, which hands the flags on unchanged.
    let data = lake.path().to_str().expect("a UTF-8 temp path");
    let via_gpuship = run(
        Path::new(binary()),
        &[
            "query",
            "SELECT repeat('x', 2000000000) AS s",
            "--since",
            "1h",
            "--data",
            data,
            "--memory-limit",
            "300MiB",
        ],
    );
    assert_eq!(via_gpuship.code, Some(1), "{}", via_gpuship.stderr);
    assert!(
        via_gpuship
            .stderr
            .contains("memory limit reached: repeat() would build a 1.9 GiB string, more than the memory limit (300.0 MiB, --memory-limit)"),
        "{}",
        via_gpuship.stderr
    );
}

#[test]
fn a_size_that_is_not_one_is_refused_by_the_flag() {
    let (lake, _hour) = lake_with_hour();
    let run = query(lake.path(), "SELECT 1", &["--memory-limit", "lots"]);
    assert_eq!(run.code, Some(2), "{}", run.stderr);
    assert!(
        run.stderr
            .contains("invalid value 'lots' for '--memory-limit <MEMORY_LIMIT>'"),
        "{}",
        run.stderr
    );
    assert!(!run.stderr.contains('\x1b'), "{:?}", run.stderr);
}
