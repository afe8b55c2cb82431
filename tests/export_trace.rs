//! `gpuship export-trace` end to end: the real agent records the stand-in libcuda workload
//! (with a failing call and entry-only launches) and an XID injected through /dev/kmsg; the
//! export of that lake must be a valid Chrome/Perfetto trace-event document holding exactly one
//! event per CUDA row and the XID as a global instant event. A corrupt file in the lake is
//! reported by name and does not stop the export. In stats mode the `cuda_stats` rows are
//! counter tracks beside the rows' slices.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::support;
use crate::support::agent::{binary, data_dir, Agent};
use crate::support::cuda_stats::{stats_config, stats_rows};
use crate::support::lake::{duckdb, files, read_table};
use crate::support::Fixtures;
use serde_json::Value;

/// A fake /proc/driver/nvidia/gpus with one GPU, on a bus no other test uses.
fn gpu_dir() -> tempfile::TempDir {
    support::lake::fake_gpu_dir(
        "NVIDIA H100 80GB HBM3",
        &[(
            0,
            "0000:c1:00.0",
            "GPU-c1c1c1c1-0000-1111-2222-333333333333",
        )],
    )
}

fn config(fixtures: &Fixtures, gpus: &Path, dev: &Path, lake: &Path) -> String {
    fixtures.lake_config(
        "node-t",
        "entry_only = [\"cuLaunchKernel*\"]\n",
        (gpus, dev, lake),
    )
}

/// Checks `trace` against the trace-event format; returns the events by `cat`.
fn validate(trace: &Value) -> BTreeMap<String, Vec<Value>> {
    assert_eq!(trace["displayTimeUnit"], "ns");
    let events = trace["traceEvents"].as_array().expect("traceEvents array");
    let mut used_pids = BTreeSet::new();
    let mut used_tracks = BTreeSet::new();
    let mut last_x: BTreeMap<(i64, i64), f64> = BTreeMap::new();
    let mut by_cat: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for event in events {
        let ph = event["ph"]
            .as_str()
            .unwrap_or_else(|| panic!("ph: {event}"));
        let ts = event["ts"]
            .as_f64()
            .unwrap_or_else(|| panic!("ts: {event}"));
        let pid = event["pid"]
            .as_i64()
            .unwrap_or_else(|| panic!("pid: {event}"));
        let tid = event["tid"]
            .as_i64()
            .unwrap_or_else(|| panic!("tid: {event}"));
        let name = event["name"]
            .as_str()
            .unwrap_or_else(|| panic!("name: {event}"));
        assert!(!name.is_empty() && ts >= 0.0, "{event}");
        match ph {
            "X" => {
                let dur = event["dur"]
                    .as_f64()
                    .unwrap_or_else(|| panic!("dur: {event}"));
                assert!(dur >= 0.0, "{event}");
                let last = last_x.entry((pid, tid)).or_insert(ts);
                assert!(
                    ts >= *last,
                    "X events of a thread go forward in time: {event}"
                );
                *last = ts;
            }
            "i" => {
                let scope = event["s"].as_str().unwrap_or_else(|| panic!("s: {event}"));
                assert!(["g", "p", "t"].contains(&scope), "{event}");
            }
            "C" => {
                let args = event["args"]
                    .as_object()
                    .unwrap_or_else(|| panic!("args: {event}"));
                assert!(
                    !args.is_empty() && args.values().all(|v| v.as_f64().is_some_and(|v| v >= 0.0)),
                    "a counter's values are numbers: {event}"
                );
            }
            "M" => {
                assert!(["process_name", "thread_name"].contains(&name), "{event}");
                assert!(event["args"]["name"].is_string(), "{event}");
                continue;
            }
            other => panic!("unexpected ph {other}: {event}"),
        }
        used_pids.insert(pid);
        used_tracks.insert((pid, tid));
        let cat = event["cat"]
            .as_str()
            .unwrap_or_else(|| panic!("cat: {event}"));
        by_cat
            .entry(cat.to_string())
            .or_default()
            .push(event.clone());
    }
    for event in events.iter().filter(|e| e["ph"] == "M") {
        let pid = event["pid"].as_i64().unwrap();
        assert!(
            used_pids.contains(&pid),
            "metadata names a pid with no event: {event}"
        );
        if event["name"] == "thread_name" {
            let tid = event["tid"].as_i64().unwrap();
            assert!(
                used_tracks.contains(&(pid, tid)),
                "names a thread with no event: {event}"
            );
        }
    }
    by_cat
}

#[test]
fn the_lake_exports_as_a_valid_trace_with_one_event_per_row() {
    let _alone = support::exclusive();
    let fixtures = Fixtures::build();
    let (data, gpus, dev) = (data_dir(), gpu_dir(), tempfile::tempdir().unwrap());
    let agent = Agent::start(
        &config(&fixtures, gpus.path(), dev.path(), data.path()),
        &[],
    );
    let workload = fixtures.gated_sequence(dev.path());
    let pid = workload.pid() as i64;
    support::kmsg(&format!("<4>NVRM: Xid (PCI:0000:c1:00): 31, pid={pid}, name=cuda_workload, channel 0x0000000a, intr 00000000. MMU Fault: ENGINE GRAPHICS GPC1 GPCCLIENT_T1_8 faulted @ 0x7f00_00000000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_WRITE"));
    agent.wait_for_log("code=31", Duration::from_secs(10));
    workload.release();
    let stopped = agent.stop();
    assert!(stopped.status.success(), "{}", stopped.log);
    let delivered = stopped.assert_nothing_lost("cuda", "cuda");

    // What the lake holds, counted two ways before anything is added to it.
    let rows: usize = read_table(data.path(), "cuda")
        .iter()
        .map(|b| b.num_rows())
        .sum();
    let glob = format!("{}/cuda/**/*.parquet", data.path().display());
    let counted = duckdb(&format!(
        "select count(*), count(*) filter (where result_name = 'NOT_CAPTURED'), \
         max(duration_ns) filter (where function = 'cuCtxSynchronize') \
         from read_parquet('{glob}', hive_partitioning=true)"
    ));
    assert_eq!(counted[0][0], rows.to_string());
    assert_eq!(
        (rows, delivered),
        (28, 28),
        "the default functions, once each"
    );
    assert_eq!(
        counted[0][1], "3",
        "cuLaunchKernel, cuLaunchKernelEx, cuLaunchKernel_ptsz"
    );
    let sync_ns: f64 = counted[0][2].parse().unwrap();

    // A corrupt file beside the real ones.
    let first = files(&data.path().join("cuda"))
        .into_iter()
        .find(|p| p.extension().is_some_and(|e| e == "parquet"))
        .expect("a cuda file");
    let corrupt = first.with_file_name("part-corrupt.parquet");
    std::fs::write(&corrupt, b"PAR1 this is not parquet PAR1").unwrap();

    let out = data.path().join("trace.json");
    let export = Command::new(binary())
        .args(["export-trace", "--since", "30m", "--data"])
        .arg(data.path())
        .arg("--output")
        .arg(&out)
        .env_remove("RUST_LOG")
        .output()
        .expect("running export-trace");
    let stderr = String::from_utf8_lossy(&export.stderr);
    assert!(export.status.success(), "{stderr}");
    assert!(stderr.contains("1 file(s) could not be read"), "{stderr}");
    assert!(stderr.contains("part-corrupt.parquet"), "{stderr}");
    assert!(
        stderr.contains("33 events (28 CUDA calls, 3 of them entry-only; 1 XIDs; 0 driver"),
        "{stderr}"
    );

    let trace: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).expect("trace JSON");
    let by_cat = validate(&trace);
    let cuda = &by_cat["cuda"];
    let (complete, instant): (Vec<&Value>, Vec<&Value>) = cuda.iter().partition(|e| e["ph"] == "X");
    assert_eq!(
        complete.len() + instant.len(),
        rows,
        "one event per cuda row"
    );
    assert_eq!((complete.len(), instant.len()), (25, 3));
    assert!(instant
        .iter()
        .all(|e| e["s"] == "t" && e["args"]["result"] == "NOT_CAPTURED"));
    assert!(cuda.iter().all(|e| e["pid"] == pid && e["tid"] == pid));
    let launch = instant
        .iter()
        .find(|e| e["name"] == "cuLaunchKernel")
        .expect("launch");
    assert_eq!(launch["args"]["grid"], serde_json::json!([120, 2, 1]));
    assert_eq!(launch["args"]["block"], serde_json::json!([256, 1, 1]));
    assert_eq!(launch["args"]["stream"], "0x5000");
    let failed: Vec<&&Value> = complete
        .iter()
        .filter(|e| e["args"]["result_code"] != 0)
        .collect();
    assert_eq!(failed.len(), 2, "the OOM allocation and the forced 700");
    let sync = failed
        .iter()
        .find(|e| e["name"] == "cuCtxSynchronize")
        .expect("sync");
    assert_eq!(sync["args"]["result"], "CUDA_ERROR_ILLEGAL_ADDRESS");
    assert_eq!((sync["dur"].as_f64().unwrap() * 1000.0).round(), sync_ns);
    let alloc = complete
        .iter()
        .find(|e| e["name"] == "cuMemAlloc_v2" && e["args"]["result_code"] == 0)
        .expect("alloc");
    assert_eq!(alloc["args"]["bytes"], 1_048_576);
    assert_eq!(alloc["args"]["device_ptr"], "0x7f0000000000");

    let xids = &by_cat["xid"];
    assert_eq!(xids.len(), 1);
    let xid = &xids[0];
    assert_eq!(
        (xid["ph"].as_str(), xid["s"].as_str()),
        (Some("i"), Some("g"))
    );
    assert_eq!(xid["name"], "XID 31 (GPU MMU page fault)");
    assert_eq!(xid["args"]["code"], 31);
    assert_eq!(xid["args"]["pci_bus_id"], "0000:c1:00.0");
    assert_eq!(xid["args"]["severity"], "error");
    assert_eq!(xid["args"]["action"], "restart_application");
    assert_eq!(xid["args"]["pid"], pid);
    assert!(
        !by_cat.contains_key("driver"),
        "no NVIDIA device here, so no driver rows"
    );

    let names: Vec<&Value> = trace["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "M")
        .collect();
    let process = names
        .iter()
        .find(|e| e["name"] == "process_name" && e["pid"] == pid)
        .expect("the workload's process name");
    assert_eq!(
        process["args"]["name"],
        format!("cuda_workload (pid {pid})")
    );
    assert!(names.iter().any(|e| e["name"] == "thread_name"
        && e["pid"] == 0
        && e["args"]["name"] == "GPU 0000:c1:00.0 NVIDIA H100 80GB HBM3 on node-t"));
    assert_eq!(
        names.len(),
        4,
        "GPU process and thread, workload process and thread"
    );
    assert_eq!(trace["traceEvents"].as_array().unwrap().len(), 33);
}

/// Stats mode, every aggregated call slow (so a row too): the rows stay one slice each, and each
/// interval of each aggregated function is a `calls` counter sample at the rate of its rows.
#[test]
fn aggregates_are_counter_tracks_beside_the_slices_of_rows() {
    let _alone = support::exclusive();
    let fixtures = Fixtures::build();
    let data = data_dir();
    let agent = Agent::start(
        &stats_config(&fixtures, data.path(), "slow_call_ns = 1\n"),
        &[],
    );
    let (pid, _) = fixtures.run_workload(
        &["sequence", "2"],
        &[("FAKE_CUDA_RESULTS", "cuCtxSynchronize=700")],
    );
    let stopped = agent.stop();
    assert!(stopped.status.success(), "{}", stopped.log);
    assert_eq!(stopped.assert_nothing_lost("cuda", "cuda"), 56);
    let stats = stats_rows(&read_table(data.path(), "cuda_stats"));
    // Per function and interval (rows of one interval share its length): calls per second.
    let mut rates = BTreeMap::<(String, u64), u64>::new();
    for row in &stats {
        *rates
            .entry((row.function.clone(), row.interval_ns))
            .or_default() += row.calls;
    }
    let mut expected: Vec<(String, f64)> = rates
        .iter()
        .map(|((function, interval), calls)| {
            let rate = *calls as f64 * 1e9 / *interval as f64;
            // As the trace's JSON carries it (serde_json may read the last digit back off).
            let rate: f64 = serde_json::from_str(&serde_json::to_string(&rate).unwrap()).unwrap();
            (format!("{function} calls"), rate)
        })
        .collect();

    let export = Command::new(binary())
        .args(["export-trace", "--since", "30m", "--data"])
        .arg(data.path())
        .env_remove("RUST_LOG")
        .output()
        .expect("running export-trace");
    let stderr = String::from_utf8_lossy(&export.stderr);
    assert!(export.status.success(), "{stderr}");
    assert!(
        stderr.contains(
            "(56 CUDA calls, 0 of them entry-only; 0 XIDs; 0 driver operations; 2 names; "
        ) && stderr.contains(&format!(
            "counter samples from {} cuda_stats rows)",
            stats.len()
        )),
        "{stderr}"
    );
    let trace: Value = serde_json::from_slice(&export.stdout).expect("trace JSON");
    let by_cat = validate(&trace);
    assert_eq!(by_cat["cuda"].len(), 56, "every row a slice, none twice");
    let counters = &by_cat["cuda_stats"];
    assert!(counters.iter().all(|e| e["pid"] == pid && e["ph"] == "C"));
    let mut found: Vec<(String, f64)> = counters
        .iter()
        .filter(|e| e["name"].as_str().unwrap().ends_with(" calls"))
        .filter_map(|e| {
            let rate = e["args"]["per s"].as_f64().unwrap();
            (rate > 0.0).then(|| (e["name"].as_str().unwrap().to_string(), rate))
        })
        .collect();
    let order = |a: &(String, f64), b: &(String, f64)| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1));
    found.sort_by(order);
    expected.sort_by(order);
    assert_eq!(found, expected);
    // Every aggregated function is timed: a rate, a mean and a p99 track each.
    let tracks: BTreeSet<&str> = counters
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    let functions: BTreeSet<&str> = stats.iter().map(|r| r.function.as_str()).collect();
    let names: Vec<String> = functions
        .iter()
        .flat_map(|f| ["calls", "mean latency", "p99 latency"].map(|t| format!("{f} {t}")))
        .collect();
    assert_eq!(tracks, names.iter().map(String::as_str).collect());
}

#[test]
fn a_bad_range_or_a_missing_lake_is_a_clear_error() {
    let _shared = support::shared();
    let run = |args: &[&str]| {
        let output = Command::new(binary()).args(args).output().unwrap();
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    let (code, stderr) = run(&["export-trace", "--since", "yesterday"]);
    assert_eq!(code, Some(1));
    assert!(stderr.contains("RFC 3339"), "{stderr}");
    let (code, stderr) = run(&[
        "export-trace",
        "--since",
        "1h",
        "--data",
        "/nonexistent/lake",
    ]);
    assert_eq!(code, Some(1));
    assert!(stderr.contains("/nonexistent/lake"), "{stderr}");
}
