//! The Parquet sink on an S3-compatible object store (moto's server, started here): the same
//! layout as on disk, objects visible only when complete, read back with DuckDB's httpfs; and
//! an outage of the store that spools and replays without losing a row.

use std::time::Duration;

use std::process::Command;

use crate::support;
use crate::support::agent::{binary, data_dir, Agent};
use crate::support::lake::{duckdb_s3, rca_query};
use crate::support::metrics::{get, scrape};
use crate::support::peers::{free_port, Moto};
use crate::support::{kmsg, Fixtures};

const BUCKET: &str = "gpu-lake";
const CREDENTIALS: [(&str, &str); 3] = [
    ("AWS_ACCESS_KEY_ID", "test"),
    ("AWS_SECRET_ACCESS_KEY", "test"),
    ("AWS_REGION", "us-east-1"),
];

/// Agent config: the stand-in library, kernel-log XIDs, Parquet into `s3://gpu-lake/<prefix>`.
fn s3_config(fixtures: &Fixtures, endpoint: &str, prefix: &str, extra_sink: &str) -> String {
    let placeholder = data_dir();
    fixtures
        .cuda_config(placeholder.path(), r#"["default"]"#)
        .replace("kmsg = false", "kmsg = true")
        .replace(
            &format!("path = \"{}\"\n", placeholder.path().display()),
            &format!(
                "path = \"s3://{BUCKET}/{prefix}\"\n{extra_sink}\n\
                 [sinks.object_store]\nendpoint = \"{endpoint}\"\nallow_http = true\n\
                 max_retries = 1\nretry_timeout_secs = 2\nrequest_timeout_secs = 2\n"
            ),
        )
}

fn rows_in_s3(moto: &Moto, prefix: &str, table: &str, filter: &str) -> u64 {
    let sql = format!(
        "SELECT count(*) FROM read_parquet('s3://{BUCKET}/{prefix}/{table}/**/*.parquet', \
         hive_partitioning = true) {filter}"
    );
    duckdb_s3(&format!("127.0.0.1:{}", moto.port), &sql)[0][0]
        .parse()
        .expect("count")
}

/// Runs `gpuship <view> --since 30m --data s3://gpu-lake/fleet --output <output>` with the
/// bucket's endpoint and credentials from the environment; asserts success, returns stderr.
fn view_of_the_bucket(moto: &Moto, view: &str, output: &std::path::Path) -> String {
    let run = Command::new(binary())
        .args([view, "--since", "30m", "--data"])
        .arg(format!("s3://{BUCKET}/fleet"))
        .arg("--output")
        .arg(output)
        .envs(CREDENTIALS)
        .env("AWS_ENDPOINT", moto.endpoint())
        .env("AWS_ALLOW_HTTP", "true")
        .env_remove("RUST_LOG")
        .output()
        .unwrap_or_else(|e| panic!("running {view}: {e}"));
    let stderr = String::from_utf8_lossy(&run.stderr).into_owned();
    assert!(run.status.success(), "{view}: {stderr}");
    stderr
}

#[test]
fn parquet_objects_land_in_s3_in_the_lake_layout_and_duckdb_reads_them() {
    let _alone = support::exclusive();
    let moto = Moto::start(0);
    moto.create_bucket(BUCKET);
    let fixtures = Fixtures::build();
    let config = s3_config(&fixtures, &moto.endpoint(), "fleet", "");
    // As in the DaemonSet: the node's name from the downward API names the rows and files.
    let mut env = CREDENTIALS.to_vec();
    env.push(("K8S_NODE_NAME", "gpu-node-7"));
    let agent = Agent::start_with_env(&config, &[], &env);
    let (pid, _) = fixtures.run_workload(&["launches", "5000"], &[]);
    kmsg("<3>NVRM: Xid (PCI:0000:5e:00): 79, pid=4242, name=trainer, GPU has fallen off the bus.");
    agent.wait_for_log("code=79", Duration::from_secs(10));
    let stopped = agent.stop();
    assert!(stopped.status.success(), "{}", stopped.log);
    let delivered_cuda = stopped.assert_nothing_lost("cuda", "cuda");
    let xid_sink = stopped.sink("xid");
    assert_eq!(xid_sink["delivered"], 1, "{}", stopped.outcome);

    // Same layout as on disk; nothing half-written or hidden is left in the bucket. The run's
    // accounting document sits beside the tables.
    let mut keys = moto.keys(BUCKET);
    assert!(!keys.is_empty());
    let documents: Vec<String> = keys
        .extract_if(.., |key| key.starts_with("fleet/_accounting/"))
        .collect();
    assert_eq!(documents.len(), 1, "{documents:?}");
    assert!(
        documents[0].starts_with("fleet/_accounting/accounting-gpu-node-7-")
            && documents[0].ends_with(".json"),
        "{documents:?}"
    );
    for key in &keys {
        let layout = (key.starts_with("fleet/cuda/dt=") || key.starts_with("fleet/xid/dt="))
            && key.contains("/hour=")
            && key.ends_with(".parquet")
            && key
                .rsplit('/')
                .next()
                .is_some_and(|name| name.starts_with("part-gpu-node-7-"));
        assert!(layout, "unexpected object {key} in {keys:?}");
    }

    assert_eq!(
        rows_in_s3(&moto, "fleet", "cuda", "WHERE host = 'gpu-node-7'"),
        delivered_cuda
    );
    assert_eq!(
        rows_in_s3(
            &moto,
            "fleet",
            "cuda",
            &format!("WHERE pid = {pid} AND function = 'cuLaunchKernel'")
        ),
        5000
    );
    assert_eq!(
        rows_in_s3(
            &moto,
            "fleet",
            "xid",
            "WHERE code = 79 AND pci_bus_id LIKE '0000:5e:00%'"
        ),
        1
    );

    // The analyst's query of docs/rca.md, as written there, over the bucket.
    let sql = rca_query(
        "s3_calls_per_host",
        "s3://gpu-lake/fleet",
        &format!("s3://{BUCKET}/fleet"),
    );
    let rows = duckdb_s3(&format!("127.0.0.1:{}", moto.port), &sql);
    let launches: u64 = rows.iter().map(|r| r[3].parse::<u64>().unwrap()).sum();
    let failed: u64 = rows.iter().map(|r| r[4].parse::<u64>().unwrap()).sum();
    assert_eq!((launches, failed), (5000, 0), "{rows:?}");

    // The views read the bucket directly: every CUDA row is one trace event.
    let out = tempfile::tempdir().unwrap();
    let trace_path = out.path().join("trace.json");
    let stderr = view_of_the_bucket(&moto, "export-trace", &trace_path);
    let trace: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&trace_path).unwrap()).unwrap();
    let launches = trace["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["name"] == "cuLaunchKernel" && e["pid"] == pid)
        .count();
    assert_eq!(launches, 5000, "{stderr}");
    let xids = trace["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "i" && e["name"].as_str().is_some_and(|n| n.starts_with("XID 79")))
        .count();
    assert_eq!(xids, 1, "{stderr}");

    // The report reads the bucket too, its accounting from the agent's document there.
    let page = out.path().join("report.html");
    let stderr = view_of_the_bucket(&moto, "report", &page);
    let html = std::fs::read_to_string(&page).unwrap();
    let delivered: u64 = stopped.outcome["accounting"]["sinks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["delivered"].as_u64().unwrap())
        .sum();
    assert_eq!(delivered, delivered_cuda + 1, "CUDA calls and the XID");
    assert!(
        html.contains(&format!(
            "From 1 accounting document(s): {delivered} delivered, 0 dropped, 0 lost in the kernel."
        )),
        "{stderr}"
    );
    assert!(html.contains("data-code=\"79\" data-severity=\"fatal\""));
}

#[test]
fn an_object_store_outage_spools_then_replays_without_loss() {
    let _shared = support::shared();
    let port = free_port();
    let endpoint = format!("http://127.0.0.1:{port}");
    let fixtures = Fixtures::build();
    let config = s3_config(
        &fixtures,
        &endpoint,
        "outage",
        "max_file_rows = 3000\nmax_file_age_secs = 1",
    ) + "\n[sinks.buffer]\nmax_events = 4000\n";
    let agent = Agent::start_with_env(&config, &[], &CREDENTIALS);
    let address = agent.metrics_address();
    let sink = "component_id=\"parquet\",component_kind=\"sink\",kind=\"cuda\"";
    let metric = |series: &str| get(&scrape(&address), &format!("{series}{{{sink}}}"));

    // The store is down from the start: uploads fail, rows are retried, then spooled.
    let mut workload = fixtures
        .workload(&["launches", "0", "20000"])
        .spawn()
        .expect("workload");
    support::wait_until(
        Duration::from_secs(40),
        "nothing spooled while the store was down",
        || metric("gpuship_component_spooled_events_total") > 0,
        || agent.log(),
    );

    // The workload stops so the spool can drain to zero; the store comes up (empty, as after
    // a restart) and the spool drains into it.
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(workload.id() as i32, libc::SIGTERM) };
    workload.wait().expect("workload exit");
    let moto = Moto::start(port);
    moto.create_bucket(BUCKET);
    support::wait_until(
        Duration::from_secs(60),
        "the spool was not replayed",
        || metric("gpuship_spool_events") == 0,
        || agent.log(),
    );
    let stopped = agent.stop();
    assert!(stopped.status.success(), "{}", stopped.log);
    let delivered = stopped.assert_nothing_lost("cuda", "cuda");
    let sink = stopped.sink("cuda");
    assert!(sink["spooled"].as_u64().unwrap() > 0, "{}", stopped.outcome);
    assert_eq!(sink["spooled"], sink["replayed"]);
    assert_eq!(sink["spooled_pending"], 0);
    assert!(
        stopped.log.contains("uploading s3://gpu-lake/outage/cuda/"),
        "the failed uploads are logged with their location:\n{}",
        stopped.log
    );
    assert_eq!(rows_in_s3(&moto, "outage", "cuda", ""), delivered);
}

/// `batch` as a whole Parquet file.
fn parquet_bytes(batch: &arrow_array::RecordBatch) -> Vec<u8> {
    let mut out = Vec::new();
    let mut writer = parquet::arrow::ArrowWriter::try_new(&mut out, batch.schema(), None).unwrap();
    writer.write(batch).unwrap();
    writer.close().unwrap();
    out
}

/// Writes a small lake under `s3://gpu-lake/<prefix>`: one XID 79 and three CUDA calls, a
/// minute ago, in their hour partitions.
fn put_small_lake(moto: &Moto, prefix: &str) {
    use gpuship_sinks::parquet::{Destination, ObjectStoreDestination, S3Url};
    use gpuship_sinks::schema::{xid_batch_of, CudaBatchBuilder, CudaRow, XidRecord};
    use gpuship_sinks::test_support::{cuda_row, host_identity, xid_record};
    let when = chrono::Utc::now() - chrono::Duration::minutes(1);
    let time_ns = when.timestamp_nanos_opt().unwrap();
    let hour = format!("dt={}/hour={}", when.format("%Y-%m-%d"), when.format("%H"));
    let identity = host_identity("node-s", "boot");
    let xid = XidRecord {
        time_ns,
        ..xid_record(79, "0000:5e:00.0", "GPU has fallen off the bus.")
    };
    let xids = xid_batch_of(&identity, &[xid]).unwrap();
    let mut calls = CudaBatchBuilder::new(identity, 3);
    for i in 0..3 {
        calls.append(&CudaRow {
            time_ns: time_ns + i,
            pid: 5,
            tid: 5,
            comm: "train",
            function: "cuCtxSynchronize",
            duration_ns: 100,
            ..cuda_row()
        });
    }
    let calls = calls.finish().unwrap();
    let url = S3Url::parse(&format!("s3://{BUCKET}/{prefix}"))
        .unwrap()
        .unwrap();
    // Building the sink's client once installs the TLS crypto provider every client needs.
    let _ = gpuship_sinks::parquet::ObjectStoreOptions::default().build(&url);
    let store = object_store::aws::AmazonS3Builder::new()
        .with_bucket_name(BUCKET)
        .with_endpoint(moto.endpoint())
        .with_allow_http(true)
        .with_virtual_hosted_style_request(false)
        .with_access_key_id("test")
        .with_secret_access_key("test")
        .with_region("us-east-1")
        .build()
        .unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let store: std::sync::Arc<dyn object_store::ObjectStore> = std::sync::Arc::new(store);
    let destination = ObjectStoreDestination::new(store, url, runtime.handle().clone());
    for (key, batch) in [
        (format!("xid/{hour}/part-node-s-1.parquet"), &xids),
        (format!("cuda/{hour}/part-node-s-2.parquet"), &calls),
    ] {
        let bytes = bytes::Bytes::from(parquet_bytes(batch));
        destination.persist(&key, &bytes).unwrap();
    }
}

#[test]
fn views_read_a_bucket_whose_endpoint_is_in_aws_endpoint_url() {
    let _shared = support::shared();
    // AWS_ENDPOINT_URL is the name the AWS CLI and SDKs use. Taken with virtual-host
    // addressing (`gpu-lake.127.0.0.1`), the listing found nothing and the report said
    // "0 XIDs in 0 incidents" for this bucket.
    let moto = Moto::start(0);
    moto.create_bucket(BUCKET);
    put_small_lake(&moto, "sdk");
    let out = tempfile::tempdir().unwrap();
    for (view, expected) in [
        ("report", "1 XIDs in "),
        (
            "export-trace",
            "(3 CUDA calls, 0 of them entry-only; 1 XIDs;",
        ),
    ] {
        let run = Command::new(binary())
            .args([view, "--since", "30m", "--data"])
            .arg(format!("s3://{BUCKET}/sdk"))
            .arg("--output")
            .arg(out.path().join(view))
            .envs(CREDENTIALS)
            .env("AWS_ENDPOINT_URL", moto.endpoint())
            .env("AWS_ALLOW_HTTP", "true")
            .env_remove("AWS_ENDPOINT")
            .env_remove("AWS_ENDPOINT_URL_S3")
            .env_remove("RUST_LOG")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert!(run.status.success(), "{view}: {stderr}");
        assert!(stderr.contains(expected), "{view}: {stderr}");
        if view == "report" {
            assert!(stderr.contains("3 CUDA calls"), "{stderr}");
        }
    }
}

#[test]
fn an_xid_reaches_the_bucket_within_seconds_while_the_agent_runs() {
    let _shared = support::shared();
    let moto = Moto::start(0);
    moto.create_bucket(BUCKET);
    let fixtures = Fixtures::build();
    let config = s3_config(&fixtures, &moto.endpoint(), "quick", "");
    let agent = Agent::start_with_env(&config, &[], &CREDENTIALS);
    kmsg("<3>NVRM: Xid (PCI:0000:5f:00): 79, pid=4243, name=trainer, GPU has fallen off the bus.");
    agent.wait_for_log("pci_bus_id=0000:5f:00.0", Duration::from_secs(10));
    let logged = std::time::Instant::now();
    // The design bound is one second (xid_max_file_age_ms) plus the upload; five leave room
    // for a busy machine. Before, the XID waited for max_file_age_secs (300 s) or a stop.
    let xid_object = || {
        moto.keys(BUCKET)
            .into_iter()
            .any(|key| key.starts_with("quick/xid/dt="))
    };
    while !xid_object() && logged.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        xid_object(),
        "no XID object 5 s after the XID, with the agent running:\n{}",
        agent.log()
    );
    assert_eq!(
        rows_in_s3(&moto, "quick", "xid", "WHERE pci_bus_id = '0000:5f:00.0'"),
        1
    );
    let stopped = agent.stop();
    assert!(stopped.status.success(), "{}", stopped.log);
    assert_eq!(
        rows_in_s3(&moto, "quick", "xid", "WHERE pci_bus_id = '0000:5f:00.0'"),
        1
    );
}
