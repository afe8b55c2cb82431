//! Reading what the Parquet sink wrote: through the arrow reader and through real DuckDB.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Command;

use arrow_array::RecordBatch;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

/// Every file under `root`, sorted.
pub fn files(root: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries {
            let path = entry.expect("dir entry").path();
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

/// All rows of one table (`<root>/<kind>/**/*.parquet`), read with the arrow reader.
pub fn read_table(root: &Path, kind: &str) -> Vec<RecordBatch> {
    files(&root.join(kind))
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "parquet"))
        .flat_map(|path| {
            let file = File::open(&path).expect("open parquet");
            ParquetRecordBatchReaderBuilder::try_new(file)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
                .build()
                .expect("reader")
                .map(|b| b.expect("batch"))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Python of the test environment (made by `make testenv`).
pub fn python() -> PathBuf {
    let path = super::repo_root().join("target/testenv/bin/python3");
    assert!(
        path.exists(),
        "{} is missing: run `make testenv` (make test does)",
        path.display()
    );
    path
}

/// Runs the Python `script` of the test environment with `args` and returns what it printed;
/// panics with its stderr when it fails.
pub fn python_script(script: &str, args: &[&str]) -> String {
    let output = Command::new(python())
        .arg("-c")
        .arg(script)
        .args(args)
        .output()
        .expect("running python");
    assert!(
        output.status.success(),
        "python failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Runs `sql` in DuckDB and returns the rows as JSON arrays of strings.
pub fn duckdb(sql: &str) -> Vec<Vec<String>> {
    duckdb_with_setup(&[], sql)
}

/// Runs `sql` in DuckDB reading `s3://` from the S3-compatible server at `endpoint`
/// (`127.0.0.1:PORT`, plain HTTP, path-style), with the httpfs extension from the test
/// environment's `duckdb-extension-httpfs` wheel (nothing is downloaded).
pub fn duckdb_s3(endpoint: &str, sql: &str) -> Vec<Vec<String>> {
    let secret = format!(
        "CREATE SECRET (TYPE s3, KEY_ID 'test', SECRET 'test', REGION 'us-east-1', \
         ENDPOINT '{endpoint}', USE_SSL false, URL_STYLE 'path')"
    );
    duckdb_with_setup(&["LOAD_HTTPFS", &secret], sql)
}

/// Runs `sql` in DuckDB (time zone UTC) with its iceberg extension and the avro one it needs,
/// from the test environment's `duckdb-extension-iceberg` and `duckdb-extension-avro` wheels
/// (nothing is downloaded): `iceberg_scan(...)` reads the tables compaction writes.
pub fn duckdb_iceberg(sql: &str) -> Vec<Vec<String>> {
    duckdb_with_setup(&["LOAD_ICEBERG", "SET TimeZone = 'UTC'"], sql)
}

/// Runs `sql` in DuckDB with its iceberg extension, after the statements `setup` (an ATTACH).
pub fn duckdb_iceberg_after(setup: &str, sql: &str) -> Vec<Vec<String>> {
    duckdb_with_setup(
        &["LOAD_HTTPFS", "LOAD_ICEBERG", "SET TimeZone = 'UTC'", setup],
        sql,
    )
}

fn duckdb_with_setup(setup: &[&str], sql: &str) -> Vec<Vec<String>> {
    let script = r#"
import duckdb, glob, json, os, sys
# A query slower than 2 s (a loaded machine) would print a progress bar into the JSON.
duckdb.execute("SET enable_progress_bar = false")
for statement in json.loads(sys.argv[2]):
    if statement in ("LOAD_HTTPFS", "LOAD_ICEBERG"):
        # iceberg needs avro loaded first, or it tries to download it.
        for name in ("httpfs",) if statement == "LOAD_HTTPFS" else ("avro", "iceberg"):
            root = os.path.dirname(__import__("duckdb_extension_" + name).__file__)
            path = glob.glob(root + "/extensions/*/%s.duckdb_extension" % name)[0]
            duckdb.execute("LOAD '%s'" % path)
        continue
    duckdb.execute(statement)
rows = duckdb.sql(sys.argv[1]).fetchall()
print(json.dumps([[None if v is None else str(v) for v in row] for row in rows]))
"#;
    let output = Command::new(python())
        .arg("-c")
        .arg(script)
        .arg(sql)
        .arg(serde_json::to_string(setup).expect("setup JSON"))
        .output()
        .expect("running duckdb");
    assert!(
        output.status.success(),
        "duckdb failed for {sql}:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let rows: Vec<Vec<Option<String>>> =
        serde_json::from_slice(&output.stdout).unwrap_or_else(|err| {
            panic!(
                "duckdb printed no JSON ({err}) for {sql}:\n{}",
                String::from_utf8_lossy(&output.stdout)
            )
        });
    rows.into_iter()
        .map(|r| {
            r.into_iter()
                .map(|v| v.unwrap_or_else(|| "NULL".into()))
                .collect()
        })
        .collect()
}

/// A query of docs/rca.md, by its `-- rca:<name>` marker, as written there, with the doc's lake
/// location (`placeholder`: `gpuship-data`, `s3://gpu-lake/fleet`, ...) replaced by `location`.
pub fn rca_query(name: &str, placeholder: &str, location: &str) -> String {
    let doc = std::fs::read_to_string(super::repo_root().join("docs/rca.md")).unwrap();
    let marker = format!("-- rca:{name}\n");
    let start = doc
        .find(&marker)
        .unwrap_or_else(|| panic!("no query {name} in docs/rca.md"))
        + marker.len();
    let end = start + doc[start..].find(';').expect("query ends with ;");
    doc[start..end].replace(placeholder, location)
}

/// A fake `/proc/driver/nvidia/gpus`: one `<bus>/information` file per `(minor, bus, uuid)`,
/// with `model`, as the driver writes it.
pub fn fake_gpu_dir(model: &str, gpus: &[(u32, &str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (minor, bus, uuid) in gpus {
        std::fs::create_dir_all(dir.path().join(bus)).unwrap();
        std::fs::write(
            dir.path().join(bus).join("information"),
            format!("Model: \t\t {model}\nGPU UUID: \t {uuid}\nBus Location: \t {bus}\nDevice Minor: \t {minor}\nGPU Firmware: \t 580.159.04\n"),
        )
        .unwrap();
    }
    dir
}
