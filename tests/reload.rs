//! SIGHUP reloads the configuration file under load: a valid file is applied (a sink added
//! with capture going on, sources restarted with their gap measured) with every identity
//! exact and every XID in the lake once; a bad file is refused with its problem and line while
//! capture goes on; a storm of SIGHUPs loses nothing. The systemd unit reloads with SIGHUP.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use arrow_array::cast::AsArray;
use arrow_array::types::Int32Type;

use crate::support::agent::{data_dir, Agent, Stopped};
use crate::support::lake::read_table;
use crate::support::metrics::{scrape, scrape_floats};
use crate::support::{self, kmsg, repo_root, wait_until, Fixtures};

mod storm;

/// The config file the agent was started with, from its command line.
fn config_path(agent: &Agent) -> PathBuf {
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", agent.pid())).expect("cmdline");
    let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
    let at = args
        .iter()
        .position(|a| *a == b"--config")
        .expect("--config");
    PathBuf::from(String::from_utf8_lossy(args[at + 1]).into_owned())
}

fn signal(pid: u32, signal: i32) {
    // SAFETY: kill(2) on the pid of a process this test started.
    assert_eq!(unsafe { libc::kill(pid as i32, signal) }, 0);
}

/// `(applied, rejected, last_reload_success)` from `/metrics`.
fn reloads(address: &str) -> (u64, u64, u64) {
    let samples = scrape(address);
    let get = |series: &str| support::metrics::get(&samples, series);
    (
        get("gpuship_config_reloads_total{result=\"applied\"}"),
        get("gpuship_config_reloads_total{result=\"rejected\"}"),
        get("gpuship_config_last_reload_success"),
    )
}

/// Sends SIGHUP, runs `meanwhile`, and waits until `/metrics` counts `expect` (applied,
/// rejected, last success).
fn reload(agent: &Agent, address: &str, expect: (u64, u64, u64), meanwhile: impl FnOnce()) {
    signal(agent.pid(), libc::SIGHUP);
    meanwhile();
    wait_until(
        Duration::from_secs(60),
        &format!("the reload was not counted as {expect:?}"),
        || reloads(address) == expect,
        || agent.log(),
    );
}

/// An XID line naming `bus` whose message ends with `marker`.
fn inject(bus: &str, marker: &str) {
    kmsg(&format!(
        "<3>NVRM: Xid (PCI:{bus}): 13, reload marker {marker}"
    ));
}

/// How many times each marker of `bus` is in the lake's `xid` table.
fn markers(lake: &Path, bus: &str) -> BTreeMap<String, usize> {
    let mut seen = BTreeMap::new();
    for batch in read_table(lake, "xid") {
        let buses = batch
            .column_by_name("pci_bus_id")
            .unwrap()
            .as_string::<i32>();
        let messages = batch.column_by_name("message").unwrap().as_string::<i32>();
        for row in 0..batch.num_rows() {
            if buses.value(row).starts_with(bus) {
                let marker = messages.value(row).rsplit(' ').next().unwrap().to_string();
                *seen.entry(marker).or_default() += 1;
            }
        }
    }
    seen
}

/// Waits until the marker `id` of `bus` is in the lake.
fn wait_for_marker(agent: &Agent, lake: &Path, bus: &str, id: &str) {
    wait_until(
        Duration::from_secs(30),
        &format!("XID {id} never reached the lake"),
        || markers(lake, bus).contains_key(id),
        || agent.log(),
    );
}

/// Waits until the agent has taken `more` CUDA records off its ring than now.
fn wait_for_calls(agent: &Agent, address: &str, more: u64) {
    let received = || scrape(address)["gpuship_ring_received_events_total{ring=\"cuda\"}"];
    let target = received() + more;
    wait_until(
        Duration::from_secs(30),
        "no CUDA calls captured",
        || received() >= target,
        || agent.log(),
    );
}

/// Each of `ids` once.
fn once(ids: &[&str]) -> BTreeMap<String, usize> {
    ids.iter().map(|id| (id.to_string(), 1)).collect()
}

/// CUDA rows in the lake by pid.
fn rows_by_pid(lake: &Path) -> BTreeMap<i32, u64> {
    let mut rows = BTreeMap::new();
    for batch in read_table(lake, "cuda") {
        let pids = batch
            .column_by_name("pid")
            .unwrap()
            .as_primitive::<Int32Type>();
        for pid in pids.values() {
            *rows.entry(*pid).or_default() += 1;
        }
    }
    rows
}

/// A stand-in workload launching until SIGTERM.
fn launching(fixtures: &Fixtures) -> Child {
    fixtures
        .workload(&["launches", "0", "20000"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("workload")
}

/// Stops a `launching` workload; its pid and the calls it made.
fn stop(workload: Child) -> (i32, u64) {
    let pid = workload.id() as i32;
    signal(workload.id(), libc::SIGTERM);
    let output = workload.wait_with_output().expect("workload exits");
    let text = String::from_utf8_lossy(&output.stdout);
    let calls = text
        .rsplit("calls=")
        .next()
        .and_then(|c| c.trim().parse().ok());
    (pid, calls.expect("the workload's count"))
}

/// Every ring and every sink's identity holds exactly, nothing is left in flight, and nothing
/// was lost in the kernel, dropped or failed.
fn assert_identities(stopped: &Stopped) {
    let accounting = &stopped.outcome["accounting"];
    for ring in accounting["rings"].as_array().unwrap() {
        let n = |key: &str| ring[key].as_u64().unwrap();
        assert_eq!(n("emitted"), n("received") + n("lost_in_kernel"), "{ring}");
        assert!(n("pending_in_ring") + n("lost_in_kernel") == 0, "{ring}");
    }
    for sink in accounting["sinks"].as_array().unwrap() {
        let n = |key: &str| sink[key].as_u64().unwrap();
        let settled = n("delivered") + n("dropped") + n("failed") + n("spooled_pending");
        assert_eq!(n("received"), settled + n("in_flight"), "{sink}");
        assert!(n("in_flight") + n("dropped") + n("failed") == 0, "{sink}");
    }
}

fn parquet(name: &str, lake: &Path) -> String {
    format!(
        "[[sinks]]\ntype = \"parquet\"\nname = \"{name}\"\npath = \"{}\"\nmax_file_age_secs = 1\n",
        lake.display()
    )
}

/// Rows of one `cuda_workload sequence` iteration under `functions = ["default"]` (its 30
/// calls but cuDriverGetVersion and cuDeviceGetCount).
const SEQUENCE_ROWS: u64 = 28;

/// The fixtures' config with kernel-log XIDs, into the Parquet sink `lake`.
fn base_config(fixtures: &Fixtures, lake: &Path) -> String {
    fixtures
        .cuda_config(lake, r#"["default"]"#)
        .replace("kmsg = false", "kmsg = true")
        .replace(
            "type = \"parquet\"\n",
            "type = \"parquet\"\nname = \"lake\"\nmax_file_age_secs = 1\n",
        )
}

#[test]
fn a_valid_file_is_applied_under_load_and_nothing_is_lost() {
    let _shared = support::shared();
    let fixtures = Fixtures::build();
    let (lake, second) = (data_dir(), data_dir());
    let agent = Agent::start(&base_config(&fixtures, lake.path()), &[]);
    let (address, path) = (agent.metrics_address(), config_path(&agent));
    let bus = "0000:f1:00";
    let first = std::fs::read_to_string(&path).unwrap();
    assert_eq!(reloads(&address), (0, 0, 1));

    // Reload 1 adds a sink and changes the first one while workload A runs: the sources stay
    // attached and no call is missed; the first sink drains before its successor starts.
    let a = launching(&fixtures);
    wait_for_calls(&agent, &address, 1000);
    inject(bus, "a1");
    wait_for_marker(&agent, lake.path(), bus, "a1");
    let with_second = format!("{first}{}", parquet("second", second.path())).replace(
        "name = \"lake\"\n",
        "name = \"lake\"\nmax_file_rows = 500000\n",
    );
    std::fs::write(&path, &with_second).unwrap();
    reload(&agent, &address, (1, 0, 1), || inject(bus, "a2"));
    inject(bus, "a3");
    let (a_pid, a_calls) = stop(a);

    // Reload 2 changes [sources] and [batch] while workload B runs: the sources restart.
    let (b, b_started) = (launching(&fixtures), Instant::now());
    wait_for_calls(&agent, &address, 1000);
    let restarted = with_second
        .replace("drain_interval_ms = 20", "drain_interval_ms = 50")
        .replace("timeout_ms = 100", "timeout_ms = 100\nmax_events = 5000");
    std::fs::write(&path, restarted).unwrap();
    reload(&agent, &address, (2, 0, 1), || inject(bus, "a4"));
    inject(bus, "a5");
    wait_for_calls(&agent, &address, 1000);
    let (b_pid, b_calls) = stop(b);
    let b_rate = b_calls as f64 / b_started.elapsed().as_secs_f64();
    let gap = scrape_floats(&address)["gpuship_config_last_reload_capture_gap_seconds"].1;
    let (c_pid, c_out) = fixtures.run_workload(&["sequence", "100"], &[]);
    assert_eq!(c_out.trim(), "workload: sequence iterations=100 calls=3000");
    inject(bus, "a6");
    wait_for_marker(&agent, lake.path(), bus, "a6");
    let stopped = agent.stop();
    assert!(stopped.status.success(), "{}", stopped.log);

    assert_identities(&stopped);
    let reloads = &stopped.outcome["accounting"]["reloads"];
    assert_eq!(
        (&reloads["applied"], &reloads["rejected"]),
        (&2.into(), &0.into())
    );
    assert!(gap > 0.0, "the restart's gap is measured");
    let sinks = r#"sinks_added=["second"] sinks_removed=[] sinks_replaced=["lake"]"#;
    for logged in ["sources_restarted=true", sinks] {
        assert!(stopped.log.contains(logged), "{logged}: {}", stopped.log);
    }
    // Every XID once in the sink that ran throughout; the added sink has those logged after
    // it was added (a2 came during the reload and may have gone either way).
    let ids = ["a1", "a2", "a3", "a4", "a5", "a6"];
    assert_eq!(markers(lake.path(), bus), once(&ids));
    let mut added = markers(second.path(), bus);
    assert!(added.remove("a2").unwrap_or(1) == 1, "{added:?}");
    assert_eq!(added, once(&ids[2..]));
    // No call of A was missed by the sink-only reload; the new sink took A's later calls.
    let (rows, rows_second) = (rows_by_pid(lake.path()), rows_by_pid(second.path()));
    assert_eq!(rows[&a_pid], a_calls);
    assert!(rows_second[&a_pid] > 0 && rows_second[&a_pid] < a_calls);
    // B ran through the restart: what it lost is the capture gap; after it, C is whole.
    let missed = b_calls - rows[&b_pid];
    eprintln!(
        "capture gap: {gap:.3} s measured by the agent; {missed} of {b_calls} calls of a workload \
         running through it ({b_rate:.0} calls/s) not captured, {:.3} s of its calls",
        missed as f64 / b_rate
    );
    assert_eq!(rows_second[&b_pid], rows[&b_pid]);
    let c_rows = 100 * SEQUENCE_ROWS;
    assert_eq!(
        (rows[&(c_pid as i32)], rows_second[&(c_pid as i32)]),
        (c_rows, c_rows)
    );
    // Each sink's counters cover its whole life, the replaced one's both instances.
    for (sink, rows) in [("lake", &rows), ("second", &rows_second)] {
        let delivered = stopped.sink_named(sink, "cuda")["delivered"]
            .as_u64()
            .unwrap();
        assert_eq!(delivered, rows.values().sum::<u64>(), "{sink}");
    }
}

#[test]
fn a_bad_file_is_refused_and_capture_goes_on() {
    let _shared = support::shared();
    let fixtures = Fixtures::build();
    let lake = data_dir();
    let agent = Agent::start(&base_config(&fixtures, lake.path()), &[]);
    let (address, path) = (agent.metrics_address(), config_path(&agent));
    let bus = "0000:f2:00";
    let good = std::fs::read_to_string(&path).unwrap();
    let line_of = |needle: &str| good.lines().position(|l| l.contains(needle)).unwrap() + 1;
    let (batch_line, lines) = (line_of("timeout_ms = 100"), good.lines().count());
    let refusals = [
        ("syntax", format!("TOML parse error at line {}", lines + 1)),
        (
            "value",
            format!("line {}: batch.max_events", batch_line + 1),
        ),
        ("deleted", "No such file or directory".into()),
        ("unreadable", "Is a directory".into()),
    ];
    let mut pids = Vec::new();
    for (n, (what, problem)) in refusals.iter().enumerate() {
        match *what {
            "syntax" => std::fs::write(&path, format!("{good}[batch\n")).unwrap(),
            "value" => {
                let text = good.replace("timeout_ms = 100", "timeout_ms = 100\nmax_events = 0");
                std::fs::write(&path, text).unwrap()
            }
            "deleted" => std::fs::remove_file(&path).unwrap(),
            // Root reads a file whatever its mode: a folder under the file's name cannot be read.
            _ => std::fs::create_dir(&path).unwrap(),
        }
        reload(&agent, &address, (0, n as u64 + 1, 0), || {});
        // The log is read from the agent's pipe by another thread: it may trail the metric.
        let refused = || {
            let log = agent.log();
            let lines = log.lines().filter(|l| l.contains("reload rejected"));
            lines.map(String::from).collect::<Vec<_>>()
        };
        wait_until(
            Duration::from_secs(10),
            what,
            || refused().len() > n,
            || agent.log(),
        );
        let refused = refused();
        assert_eq!(refused.len(), n + 1, "{what}: logged once");
        let line = &refused[n];
        assert!(
            line.contains("ERROR") && line.contains(problem.as_str()),
            "{what}: {line}"
        );
        // Still capturing on the previous configuration.
        let (pid, out) = fixtures.run_workload(&["sequence", "1"], &[]);
        assert!(out.contains("calls=30"), "{what}: {out}");
        pids.push(pid as i32);
        inject(bus, what);
    }
    std::fs::remove_dir(&path).unwrap();
    std::fs::write(&path, &good).unwrap();
    reload(&agent, &address, (1, 4, 1), || {});
    wait_for_marker(&agent, lake.path(), bus, "unreadable");
    let stopped = agent.stop();
    assert!(stopped.status.success(), "{}", stopped.log);
    assert_identities(&stopped);
    let rows = rows_by_pid(lake.path());
    assert!(
        pids.iter().all(|pid| rows[pid] == SEQUENCE_ROWS),
        "{rows:?} {pids:?}"
    );
    let ids = ["syntax", "value", "deleted", "unreadable"];
    assert_eq!(markers(lake.path(), bus), once(&ids));
}
