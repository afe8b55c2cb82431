//! Real eBPF, real mount and PID namespaces: stand-in CUDA workloads, each in a namespace of
//! its own with libcuda at a path only it sees (a private tmpfs, as a container's), are
//! captured exactly by an agent that was told no library path: one that started before the
//! agent, one with a second library file that exists only inside its namespace (found through
//! the `openat` tracepoint and attached while it runs), one mapping the first file again at
//! another path (no second attach). The attach of the late file is timed and the process
//! counted as attached late; when the processes end, both files are detached. A workload that
//! calls at once is captured from the attach on, and counted late.
//!
//! The namespaces are made with `unshare --mount --pid --fork`, which is what a container
//! runtime does for a container's filesystem and process view.

mod contained;

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::cuda_capture::{expected_sequence, NAMED_EXTRAS};
use crate::support;
use crate::support::agent::{data_dir, Agent};
use crate::support::cuda_rows::{rows, Call};
use crate::support::lake::read_table;
use crate::support::metrics::{get, scrape};
use crate::support::Fixtures;
use contained::{Contained, Library};

fn config(data: &Path) -> String {
    format!(
        "[agent]\nprogress_interval_secs = 1\n\n[sources.xid]\ntracepoint = false\nkmsg = false\n\n\
         [sources.cuda]\nlibraries = []\ndiscover_libraries = true\nlibrary_rescan_secs = 1\n\
         functions = {NAMED_EXTRAS}\nstats = []\ndrain_interval_ms = 20\n\n\
         [batch]\ntimeout_ms = 100\n\n[[sinks]]\ntype = \"parquet\"\npath = \"{}\"\n",
        data.display()
    )
}

/// `gpuship_cuda_library_<family>` series by their `file` label.
fn by_file(samples: &BTreeMap<String, u64>, family: &str) -> BTreeMap<String, u64> {
    let prefix = format!("gpuship_cuda_library_{family}{{");
    samples
        .iter()
        .filter(|(series, _)| series.starts_with(&prefix))
        .map(|(series, value)| {
            let file = series
                .split("file=\"")
                .nth(1)
                .and_then(|rest| rest.split('"').next())
                .unwrap_or_default()
                .to_string();
            (file, *value)
        })
        .collect()
}

/// `major:minor:inode` of a file as maps lines give it (plain files here: `stat`'s).
fn file_label(path: &Path) -> String {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).unwrap();
    format!(
        "{:x}:{:x}:{}",
        libc::major(meta.dev()),
        libc::minor(meta.dev()),
        meta.ino()
    )
}

fn calls_of(rows: &[crate::support::cuda_rows::Row], pid: u32) -> Vec<Call> {
    rows.iter()
        .filter(|r| r.pid == pid as i32)
        .map(|r| r.call.clone())
        .collect()
}

#[test]
fn workloads_in_their_own_mount_namespaces_are_captured_exactly() {
    let _exclusive = support::exclusive();
    let fixtures = Fixtures::build();
    let data = data_dir();
    let scratch = tempfile::tempdir().unwrap();
    let first = fixtures.libcuda.clone();
    // A second library file, only ever placed inside the second workload's namespace.
    let second = scratch.path().join("second-libcuda.so.1");
    std::fs::copy(&first, &second).unwrap();

    let before = Contained::start(
        &fixtures,
        &scratch.path().join("ns-before/usr/lib/x86_64-linux-gnu"),
        Library::Bind(&first),
        &["sequence", "2"],
        scratch.path(),
    );
    let agent = Agent::start(&config(data.path()), &[]);
    let address = agent.metrics_address();
    let samples = scrape(&address);
    assert_eq!(
        by_file(&samples, "attached"),
        BTreeMap::from([(file_label(&first), 1)]),
        "{}",
        agent.log()
    );

    // Started after the agent: a file of its own (at a path with quotes, a newline and a
    // terminal escape), and the first file at another path.
    let odd = scratch.path().join("ns-after/opt/\"job\"\n\x1b[31m/lib");
    let after = Contained::start(
        &fixtures,
        &odd,
        Library::Copy(&second),
        &["sequence", "2"],
        scratch.path(),
    );
    let again = Contained::start(
        &fixtures,
        &scratch.path().join("ns-again/run/nvidia/driver/usr/lib64"),
        Library::Bind(&first),
        &["sequence", "2"],
        scratch.path(),
    );
    let mut attached = BTreeMap::new();
    support::wait_until(
        Duration::from_secs(20),
        "the second file attached",
        || {
            attached = by_file(&scrape(&address), "processes");
            attached.len() == 2 && attached.get(&file_label(&first)) == Some(&2)
        },
        || agent.log(),
    );
    let samples = scrape(&address);
    let late_file = attached
        .keys()
        .find(|f| **f != file_label(&first))
        .unwrap()
        .clone();
    assert_eq!(
        by_file(&samples, "attached"),
        BTreeMap::from([(file_label(&first), 1), (late_file.clone(), 1)])
    );
    assert_eq!(by_file(&samples, "processes")[&late_file], 1);
    assert_eq!(
        get(&samples, "gpuship_cuda_processes_attached_late_total"),
        1
    );
    assert_eq!(
        get(&samples, "gpuship_cuda_library_timed_attaches_total"),
        1
    );
    assert_eq!(
        get(&samples, "gpuship_cuda_library_attach_failures_total"),
        0
    );
    let log = agent.log();
    assert!(
        log.contains("a process maps a new CUDA library: attached")
            && log.contains("processes_attached_late=1"),
        "{log}"
    );
    let pids = [before.host_pid, after.host_pid, again.host_pid];
    for workload in [before, after, again] {
        assert_eq!(
            workload.release().trim(),
            "workload: sequence iterations=2 calls=60"
        );
    }

    // Nobody maps either file any more: both are detached at the next rescan.
    support::wait_until(
        Duration::from_secs(20),
        "both files detached",
        || {
            let samples = scrape(&address);
            by_file(&samples, "attached").is_empty()
                && samples.get("gpuship_cuda_library_detached_total") == Some(&2)
        },
        || agent.log(),
    );
    let stopped = agent.stop();
    assert!(stopped.status.success(), "{}", stopped.log);
    assert_eq!(stopped.assert_nothing_lost("cuda", "cuda"), 180);
    let rows = rows(&read_table(data.path(), "cuda"));
    for pid in pids {
        assert_eq!(calls_of(&rows, pid), expected_sequence(2), "pid {pid}");
    }
}

#[test]
fn a_workload_that_calls_before_the_attach_is_captured_from_it_on_and_counted_late() {
    let _exclusive = support::exclusive();
    let fixtures = Fixtures::build();
    let data = data_dir();
    let scratch = tempfile::tempdir().unwrap();
    let agent = Agent::start(&config(data.path()), &[]);
    let address = agent.metrics_address();
    assert!(by_file(&scrape(&address), "attached").is_empty());
    // Ungated: 300,000 launches from the moment the library is mapped, 1 ms of sleep per 1,000.
    std::fs::write(scratch.path().join("go-now"), b"").unwrap();
    let mount = scratch.path().join("ns/lib");
    std::fs::create_dir_all(&mount).unwrap();
    let output = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "--pid", "--fork", "bash", "-c"])
        .arg(r#"mount -t tmpfs tmpfs "$1" && cp "$2" "$1/libcuda.so.1" && exec env CUDA_LIB="$1/libcuda.so.1" "$3" launches 300000 1000"#)
        .arg("bash")
        .arg(&mount)
        .arg(&fixtures.libcuda)
        .arg(&fixtures.workload)
        .output()
        .expect("unshare");
    assert!(output.status.success(), "{output:?}");
    assert_eq!(
        String::from_utf8_lossy(&output.stdout).trim(),
        "workload: launches calls=300000"
    );
    let samples = scrape(&address);
    assert_eq!(
        get(&samples, "gpuship_cuda_processes_attached_late_total"),
        1
    );
    assert_eq!(
        get(&samples, "gpuship_cuda_library_timed_attaches_total"),
        1
    );
    let stopped = agent.stop();
    assert!(stopped.status.success(), "{}", stopped.log);
    let captured = stopped.assert_nothing_lost("cuda", "cuda");
    let rows = rows(&read_table(data.path(), "cuda"));
    assert_eq!(rows.len() as u64, captured);
    // The attach came while it ran: the calls before it are not seen.
    assert!(captured > 0 && captured < 300_000, "{captured}");
    assert!(rows.iter().all(|r| r.call.function == "cuLaunchKernel"));
}

#[test]
fn a_mapped_file_that_is_no_library_degrades_health_and_loses_nothing_else() {
    let _exclusive = support::exclusive();
    let fixtures = Fixtures::build();
    let data = data_dir();
    let scratch = tempfile::tempdir().unwrap();
    // A process mapping a file named like the driver library that is not ELF at all.
    let bogus = scratch.path().join("libcuda.so.1");
    std::fs::write(&bogus, vec![b'x'; 8192]).unwrap();
    let mut mapper = Command::new("python3")
        .arg("-c")
        .arg("import mmap, sys, time\nf = open(sys.argv[1], 'rb')\nm = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)\nprint('mapped', flush=True)\ntime.sleep(120)")
        .arg(&bogus)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = [0u8; 7];
    mapper
        .stdout
        .as_mut()
        .unwrap()
        .read_exact(&mut line)
        .unwrap();
    let agent = Agent::start(&config(data.path()), &[]);
    let address = agent.metrics_address();
    let samples = scrape(&address);
    assert_eq!(
        by_file(&samples, "attached"),
        BTreeMap::from([(file_label(&bogus), 0)])
    );
    assert_eq!(
        get(&samples, "gpuship_cuda_library_attach_failures_total"),
        1
    );
    let (status, body) =
        crate::support::metrics::http(&address, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(status, 200);
    assert!(
        body.starts_with(
            "degraded: 1 processes map 1 CUDA libraries the agent could not attach (parsing "
        ) && body.contains("libcuda.so.1"),
        "{body}"
    );
    // A real workload beside it is captured exactly.
    let workload = Contained::start(
        &fixtures,
        &scratch.path().join("ns/lib"),
        Library::Copy(&fixtures.libcuda),
        &["sequence", "1"],
        scratch.path(),
    );
    support::wait_until(
        Duration::from_secs(20),
        "the real library attached",
        || by_file(&scrape(&address), "attached").values().sum::<u64>() == 1,
        || agent.log(),
    );
    let pid = workload.host_pid;
    assert_eq!(
        workload.release().trim(),
        "workload: sequence iterations=1 calls=30"
    );
    let _ = mapper.kill();
    let _ = mapper.wait();
    let stopped = agent.stop();
    assert!(stopped.status.success(), "{}", stopped.log);
    assert_eq!(stopped.assert_nothing_lost("cuda", "cuda"), 30);
    let rows = rows(&read_table(data.path(), "cuda"));
    assert_eq!(calls_of(&rows, pid), expected_sequence(1));
}

#[test]
fn doctor_lists_the_libraries_processes_map_and_where_it_reaches_them() {
    let _exclusive = support::exclusive();
    let fixtures = Fixtures::build();
    let scratch = tempfile::tempdir().unwrap();
    let mount = scratch.path().join("ns-doctor/usr/local/nvidia/lib64");
    let workload = Contained::start(
        &fixtures,
        &mount,
        Library::Copy(&fixtures.libcuda),
        &["sequence", "1"],
        scratch.path(),
    );
    let config = scratch.path().join("doctor.toml");
    std::fs::write(
        &config,
        "[sources.cuda]\nlibraries = []\ndiscover_libraries = true\n",
    )
    .unwrap();
    let output = Command::new(support::agent::binary())
        .args(["--log-level=warn", "doctor", "--json", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    let checks: Vec<serde_json::Value> = serde_json::from_slice(&output.stdout).unwrap();
    let library = mount.join("libcuda.so.1");
    let ours: Vec<&serde_json::Value> = checks
        .iter()
        .filter(|c| {
            c["probe"].as_str().is_some_and(|p| {
                p.starts_with(&format!("cuda library {} (file ", library.display()))
            })
        })
        .collect();
    assert_eq!(ours.len(), 1, "{checks:#?}");
    assert_eq!(ours[0]["ok"], true);
    let pid = workload.host_pid;
    assert_eq!(
        ours[0]["detail"]
            .as_str()
            .unwrap()
            .split(", ")
            .next()
            .unwrap(),
        format!(
            "mapped by 1 processes (pids {pid}); reached at /proc/{pid}/root{}",
            library.display()
        )
    );
    let cuda = checks.iter().find(|c| c["probe"] == "cuda").unwrap();
    assert_eq!(cuda["ok"], true);
    assert_eq!(
        cuda["detail"],
        "60 symbols in 1 library attached and detached"
    );
    assert_eq!(
        workload.release().trim(),
        "workload: sequence iterations=1 calls=30"
    );
}
