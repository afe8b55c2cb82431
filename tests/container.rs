//! The container image, run for real: `deploy/container/build.sh` builds it (from this run's
//! agent binary, [`podman::test_image`]) and podman runs it the way the DaemonSet says
//! ([`daemonset::DaemonSet`], read from the rendered Kustomize base: host PID namespace,
//! exactly the capabilities it adds, its seccomp profile, read-only root, memory limit, its
//! hostPath mounts with a temporary folder as the host's state folder, its ConfigMap's config),
//! on this VM's own kernel. Nothing is emulated: podman runs containers here with runc
//! (`podman.rs` says why not crun).
//!
//! - [`workloads_in_other_containers_are_captured_exactly`] (the least-privileged base):
//!   stand-in CUDA workloads run in containers of their own, each with its own copy of libcuda
//!   at a path only it has (`/usr/lib/x86_64-linux-gnu/libcuda.so.1`, bind-mounted as the
//!   NVIDIA container toolkit does), one started before the agent, one after; every call of
//!   each is counted once, with its container's id. The base cannot open the host's
//!   `/dev/kmsg` (an unprivileged container's device cgroup refuses it), and says so.
//! - [`the_privileged_image_writes_host_xids_once`] (the base with `components/privileged`):
//!   `/health` and every probe answer 200; XIDs written in the driver's format to the host's
//!   `/dev/kmsg` reach the lake in the host's state folder exactly once, across a restart of
//!   the container (one logged while no agent ran).

mod agent;
mod daemonset;
mod flags;
mod podman;

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::time::Duration;

use crate::support;
use crate::support::lake::{duckdb, read_table};
use crate::support::metrics::scrape;
use crate::support::{kmsg, Fixtures};
use agent::{config_with_parquet_sinks, AgentContainer, NODE_NAME};
use arrow_array::cast::AsArray;
use arrow_array::types::{UInt32Type, UInt64Type};
use daemonset::{DaemonSet, Variant};
use podman::{podman_ok, rootfs, Container};

/// A bus id no other test writes.
const BUS: &str = "0000:c7:00";

fn xid(code: u32, detail: &str) -> String {
    format!("<4>NVRM: Xid (PCI:{BUS}): {code}, pid=4242, name=python3, {detail}")
}

/// XIDs of [`BUS`] the agent counted on `/metrics`.
fn xids_counted(agent: &AgentContainer) -> u64 {
    scrape(&agent.address)
        .iter()
        .filter(|(series, _)| {
            series.starts_with("gpuship_gpu_xid_errors_total{")
                && series.contains(&format!("pci_bus_id=\"{BUS}.0\""))
        })
        .map(|(_, n)| n)
        .sum()
}

fn wait_for_xids(agent: &AgentContainer, count: u64) {
    support::wait_until(
        Duration::from_secs(20),
        &format!("{count} XIDs of {BUS} on /metrics"),
        || xids_counted(agent) == count,
        || agent.container.logs(),
    );
}

#[test]
fn the_privileged_image_writes_host_xids_once() {
    let _shared = support::shared();
    let ds = DaemonSet::read(Variant::Privileged);
    assert!(ds.host_pid, "{}: hostPID", ds.source);
    let state = tempfile::Builder::new()
        .prefix("gpuship-node-")
        .tempdir()
        .unwrap();
    let work = tempfile::tempdir().unwrap();
    let (_, lake) = config_with_parquet_sinks(&ds.config, &ds.state_dir());
    let host_lake = ds
        .host_path(&lake, state.path())
        .unwrap_or_else(|| panic!("the lake {lake} is on no hostPath of {}", ds.source));

    let first = AgentContainer::start(&ds, state.path(), work.path());
    let metrics = scrape(&first.address);
    assert!(
        metrics.contains_key("gpuship_kernel_emitted_events_total{ring=\"xid\"}"),
        "{metrics:?}"
    );
    kmsg(&xid(79, "GPU has fallen off the bus."));
    kmsg(&xid(31, "channel 0x00000002, intr 00000000. MMU Fault: ENGINE GRAPHICS GPC0 faulted @ 0x1_00000000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ"));
    wait_for_xids(&first, 2);
    let (code, log) = first.stop(&ds);
    assert_eq!(code, 0, "{log}");

    // Logged while no agent runs: the next container reads it from the cursor in the host's
    // state folder, and not the two before it again.
    kmsg(&xid(43, "Ch 00000010"));
    let second = AgentContainer::start(&ds, state.path(), work.path());
    kmsg(&xid(
        94,
        "Ch 00000008, errorString CTX SWITCH TIMEOUT, Info 0x2c003",
    ));
    wait_for_xids(&second, 2);
    let (code, log) = second.stop(&ds);
    assert_eq!(code, 0, "{log}");

    let mut rows = Vec::new();
    for batch in read_table(&host_lake, "xid") {
        let bus = batch["pci_bus_id"].as_string::<i32>();
        let host = batch["host"].as_string::<i32>();
        let source = batch["source"].as_string::<i32>();
        let code = batch["code"].as_primitive::<UInt32Type>();
        let seq = batch["kmsg_seq"].as_primitive::<UInt64Type>();
        for i in 0..batch.num_rows() {
            if bus.value(i) == format!("{BUS}.0") {
                rows.push((
                    seq.value(i),
                    code.value(i),
                    host.value(i).to_string(),
                    source.value(i).to_string(),
                ));
            }
        }
    }
    rows.sort();
    let found: Vec<(u32, &str, &str)> = rows
        .iter()
        .map(|r| (r.1, r.2.as_str(), r.3.as_str()))
        .collect();
    assert_eq!(
        found,
        [79, 31, 43, 94].map(|c| (c, NODE_NAME, "kmsg")),
        "every XID once, in the host's lake {}",
        host_lake.display()
    );
}

/// Calls per function of the stand-in's `sequence 2` that the default probes see: every call
/// but `cuDriverGetVersion` and `cuDeviceGetCount`, which only named probes see.
fn expected_calls() -> BTreeMap<String, u64> {
    let mut calls = BTreeMap::new();
    for call in crate::cuda_capture::expected_sequence(2) {
        if call.function != "cuDriverGetVersion" && call.function != "cuDeviceGetCount" {
            *calls.entry(call.function).or_insert(0) += 1;
        }
    }
    calls
}

/// A stand-in CUDA workload in a container of its own, holding before its first call until
/// its gate file exists.
struct Workload {
    container: Container,
    gate: tempfile::TempDir,
    /// The inode of its library (the agent's `file` label ends with it).
    inode: u64,
    _rootfs: tempfile::TempDir,
}

const CONTAINER_LIBCUDA: &str = "/usr/lib/x86_64-linux-gnu/libcuda.so.1";

impl Workload {
    fn start(fixtures: &Fixtures, library: &std::path::Path, name: &str) -> Workload {
        let dir = tempfile::tempdir().unwrap();
        rootfs(dir.path(), &fixtures.workload, name, &[&fixtures.libcuda]);
        let gate = tempfile::tempdir().unwrap();
        let args: Vec<String> = [
            "--network=none".to_string(),
            format!("--volume={}:{CONTAINER_LIBCUDA}:ro", library.display()),
            format!("--volume={}:/gate", gate.path().display()),
            format!("--env=CUDA_LIB={CONTAINER_LIBCUDA}"),
            "--env=WORKLOAD_WAIT_FILE=/gate/go".into(),
            "--env=WORKLOAD_LINGER_MS=1500".into(),
            "--rootfs".into(),
            dir.path().display().to_string(),
            format!("/usr/local/bin/{name}"),
            "sequence".into(),
            "2".into(),
        ]
        .into();
        let container = Container::run("gpuship-workload", &args);
        let maps = format!("/proc/{}/maps", container.pid());
        support::wait_until(
            Duration::from_secs(10),
            &format!("{name} maps its libcuda"),
            || std::fs::read_to_string(&maps).is_ok_and(|m| m.contains(CONTAINER_LIBCUDA)),
            || container.logs(),
        );
        Workload {
            container,
            gate,
            inode: std::fs::metadata(library).unwrap().ino(),
            _rootfs: dir,
        }
    }

    /// Opens the gate once the agent says this workload's library is attached.
    fn release_when_attached(&self, agent: &AgentContainer) {
        let suffix = format!(":{}\"", self.inode);
        support::wait_until(
            Duration::from_secs(20),
            &format!("the agent attaches the library of {}", self.container.name),
            || {
                scrape(&agent.address).iter().any(|(series, n)| {
                    series.starts_with("gpuship_cuda_library_attached{")
                        && series.contains(&suffix)
                        && *n == 1
                })
            },
            || agent.container.logs(),
        );
        std::fs::write(self.gate.path().join("go"), b"").unwrap();
    }

    fn finish(&self) -> String {
        assert_eq!(self.container.exit_code(), 0, "{}", self.container.logs());
        podman_ok(&["inspect", "--format", "{{.Id}}", &self.container.name])
            .trim()
            .to_string()
    }
}

#[test]
fn workloads_in_other_containers_are_captured_exactly() {
    let _shared = support::shared();
    let ds = DaemonSet::read(Variant::Base);
    assert!(
        !ds.privileged && ds.drop_all,
        "{}: least privilege",
        ds.source
    );
    // Built first: the workload started before the agent waits 30 s at most for its gate.
    podman::test_image();
    let fixtures = Fixtures::build();
    // Two library files: each workload's own copy, as two driver versions or images would be.
    let second_library = fixtures.dir.path().join("second/libcuda.so.1");
    std::fs::create_dir_all(second_library.parent().unwrap()).unwrap();
    std::fs::copy(&fixtures.libcuda, &second_library).unwrap();
    let state = tempfile::Builder::new()
        .prefix("gpuship-node-")
        .tempdir()
        .unwrap();
    let work = tempfile::tempdir().unwrap();
    let (_, lake) = config_with_parquet_sinks(&ds.config, &ds.state_dir());
    let host_lake = ds
        .host_path(&lake, state.path())
        .expect("the lake on a hostPath");

    let before = Workload::start(&fixtures, &fixtures.libcuda, "wl_before");
    let agent = AgentContainer::start(&ds, state.path(), work.path());
    let log = agent.container.logs();
    let started = log
        .lines()
        .find(|l| l.contains("capture started"))
        .unwrap_or_default();
    assert!(
        log.contains("cannot open /dev/kmsg: Operation not permitted")
            && started.contains("sources=[")
            && !started.contains("\"kmsg\""),
        "the device cgroup keeps an unprivileged container off /dev/kmsg:\n{log}"
    );
    before.release_when_attached(&agent);
    let after = Workload::start(&fixtures, &second_library, "wl_after");
    after.release_when_attached(&agent);
    let ids = [("wl_before", before.finish()), ("wl_after", after.finish())];
    for (name, workload) in [("wl_before", &before), ("wl_after", &after)] {
        assert!(
            workload
                .container
                .logs()
                .contains("workload: sequence iterations=2 calls=60"),
            "{name}: {}",
            workload.container.logs()
        );
    }
    std::thread::sleep(Duration::from_millis(600));
    let (code, log) = agent.stop(&ds);
    assert_eq!(code, 0, "{log}");

    // Calls per workload and function: the rows of `cuda` (flight-recorder copies aside) for
    // functions made rows, the `cuda_stats` counts for those the defaults add up in the kernel.
    let glob = |table: &str| {
        format!(
            "read_parquet('{}/{table}/**/*.parquet', hive_partitioning=true)",
            host_lake.display()
        )
    };
    let counted = duckdb(&format!(
        "with r as (select comm, function, count(*) n from {} where flight_recorder is not true \
           group by all), \
         s as (select comm, function, sum(calls) n from {} group by all) \
         select comm, function, coalesce(s.n, r.n) from r full join s using (comm, function) \
         where comm in ('wl_before', 'wl_after') order by all",
        glob("cuda"),
        glob("cuda_stats")
    ));
    let containers = duckdb(&format!(
        "select comm, coalesce(container_id, 'NULL'), count(*) from {} \
         where comm in ('wl_before', 'wl_after') group by all order by all",
        glob("cuda")
    ));
    for (name, id) in &ids {
        let mine: BTreeMap<String, u64> = counted
            .iter()
            .filter(|r| &r[0] == name)
            .map(|r| (r[1].clone(), r[2].parse().unwrap()))
            .collect();
        assert_eq!(mine, expected_calls(), "{name}:\n{counted:?}\n{log}");
        let named: Vec<&Vec<String>> = containers.iter().filter(|r| &r[0] == name).collect();
        assert_eq!(
            named.len(),
            1,
            "{name}: every row names its container: {containers:?}"
        );
        assert_eq!(&named[0][1], id, "{name}: {containers:?}");
    }
}
