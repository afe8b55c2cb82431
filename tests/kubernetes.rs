//! Kubernetes pod identity end to end: processes placed in a real kubepods cgroup (as the
//! kubelet's systemd cgroup driver names it, under the cgroup v2 mount) with the kubelet's pod
//! log folder beside it. Every CUDA call, every driver ioctl and the XID that names the process
//! must carry the pod's container id, UID, name and namespace; a process outside the pod none.
//! The docs/rca.md per-pod query runs on the result.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::support;
use crate::support::agent::{binary, data_dir, Agent};
use crate::support::lake::{duckdb, rca_query};
use crate::support::Fixtures;

const NAMESPACE: &str = "ml-team";
const POD: &str = "trainer-0";

/// Three NV_ESC_RM_CONTROL requests on /dev/null (major 1 stands in for NVIDIA's), then the
/// process stays a moment, as a CUDA process would.
const IOCTLS: &str = r#"
import errno, fcntl, os, sys, time
fd = os.open("/dev/null", os.O_RDONLY)
for _ in range(3):
    try:
        fcntl.ioctl(fd, 0xC020462A, bytes(32))
    except OSError as err:
        assert err.errno == errno.ENOTTY, err
print(os.getpid(), flush=True)
time.sleep(1.5)
"#;

/// A pod's cgroup, created for the test and removed (leaf first) when dropped.
struct PodCgroup {
    created: Vec<PathBuf>,
    leaf: PathBuf,
}

impl PodCgroup {
    /// `<cgroup2>/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod<uid>.slice/
    /// cri-containerd-<container>.scope`.
    fn create(uid: &str, container: &str) -> PodCgroup {
        let root = cgroup2_mount();
        let systemd_uid = uid.replace('-', "_");
        let mut path = root;
        let mut created = Vec::new();
        for part in [
            "kubepods.slice".to_string(),
            "kubepods-besteffort.slice".to_string(),
            format!("kubepods-besteffort-pod{systemd_uid}.slice"),
            format!("cri-containerd-{container}.scope"),
        ] {
            path.push(part);
            if !path.exists() {
                std::fs::create_dir(&path)
                    .unwrap_or_else(|e| panic!("creating cgroup {}: {e}", path.display()));
                created.push(path.clone());
            }
        }
        PodCgroup {
            created,
            leaf: path,
        }
    }

    /// Runs `program args` inside the cgroup (a shell joins it, then execs the program).
    fn spawn(&self, program: &Path, args: &[&str], env: &[(&str, &str)]) -> Child {
        Command::new("sh")
            .arg("-c")
            .arg(r#"echo $$ > "$0/cgroup.procs" && exec "$@""#)
            .arg(&self.leaf)
            .arg(program)
            .args(args)
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .spawn()
            .expect("starting a process in the pod cgroup")
    }
}

impl Drop for PodCgroup {
    fn drop(&mut self) {
        for dir in self.created.iter().rev() {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// Where the cgroup v2 hierarchy is mounted (`/sys/fs/cgroup`, or `/sys/fs/cgroup/unified` on
/// hybrid hosts such as this test VM).
fn cgroup2_mount() -> PathBuf {
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    mounts
        .lines()
        .find_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let mount_point = left.split_whitespace().nth(4)?;
            (right.split_whitespace().next()? == "cgroup2").then(|| PathBuf::from(mount_point))
        })
        .expect("a cgroup2 mount (the test needs cgroup v2 or a hybrid hierarchy)")
}

fn random_hex(bytes: usize) -> String {
    let data = std::fs::read("/proc/sys/kernel/random/uuid").unwrap();
    let seed = String::from_utf8(data).unwrap().replace(['-', '\n'], "");
    seed.repeat(bytes * 2 / seed.len() + 1)[..bytes * 2].to_string()
}

/// First stdout line of a child (its report), the child still running.
fn first_line(child: &mut Child) -> String {
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    line.trim().to_string()
}

#[test]
fn every_row_of_a_pod_process_names_its_container_and_pod() {
    let _shared = support::shared();
    let fixtures = Fixtures::build();
    let data = data_dir();
    let uid = {
        let hex = random_hex(16);
        format!(
            "{}-{}-{}-{}-{}",
            &hex[..8],
            &hex[8..12],
            &hex[12..16],
            &hex[16..20],
            &hex[20..]
        )
    };
    let container = random_hex(32);
    let pod_logs = tempfile::tempdir().unwrap();
    std::fs::create_dir(pod_logs.path().join(format!("{NAMESPACE}_{POD}_{uid}"))).unwrap();
    // Another pod on the node, which no process here belongs to.
    std::fs::create_dir(
        pod_logs
            .path()
            .join("kube-system_nvidia-dcgm-x7k2p_0a1b2c3d-0000-4000-8000-000000000001"),
    )
    .unwrap();
    let cgroup = PodCgroup::create(&uid, &container);

    let config = format!(
        "[agent]\nprogress_interval_secs = 1\n\n[sources.xid]\ntracepoint = false\nkmsg = true\n\n\
         [sources.cuda]\nlibraries = [\"{}\"]\n\
         functions = [\"default\", \"cuDriverGetVersion\", \"cuDeviceGetCount\"]\n\
         stats = []\ndrain_interval_ms = 20\n\n\
         [sources.driver]\nioctl = true\ndevice_majors = [1]\n\n\
         [enrich]\npod_log_dir = \"{}\"\n\n\
         [batch]\ntimeout_ms = 100\n\n[[sinks]]\ntype = \"parquet\"\npath = \"{}\"\n",
        fixtures.libcuda.display(),
        pod_logs.path().display(),
        data.path().display()
    );
    let agent = Agent::start(&config, &[]);

    // In the pod: 30 CUDA calls (two fail: the sequence's 1 TiB allocation and a sync made to
    // return 700), then an XID that names the process.
    let mut trainer = cgroup.spawn(
        &fixtures.workload,
        &["sequence", "1"],
        &[
            ("CUDA_LIB", fixtures.libcuda.to_str().unwrap()),
            ("FAKE_CUDA_RESULTS", "cuCtxSynchronize=700"),
            ("WORKLOAD_LINGER_MS", "3000"),
        ],
    );
    let trainer_pid = trainer.id();
    assert_eq!(
        first_line(&mut trainer),
        "workload: sequence iterations=1 calls=30"
    );
    support::kmsg(&format!(
        "<4>NVRM: Xid (PCI:0000:6e:00): 31, pid={trainer_pid}, name=cuda_workload, channel 0x00000008, intr 00000000. MMU Fault: ENGINE GRAPHICS GPC0 GPCCLIENT_T1_0 faulted @ 0x7f01_00000000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_WRITE"
    ));
    agent.wait_for_log(
        &format!("pod=\"{NAMESPACE}/{POD}\""),
        Duration::from_secs(10),
    );

    // In the pod: three driver ioctls (Python makes a few terminal ioctls of its own on
    // /dev/null; every row of the process must name the pod).
    let mut python = cgroup.spawn(Path::new("python3"), &["-c", IOCTLS], &[]);
    let python_pid: u32 = first_line(&mut python).parse().unwrap();
    assert_eq!(python_pid, python.id());

    // On the host, outside any pod: the same 30 calls.
    let (host_pid, stdout) =
        fixtures.run_workload(&["sequence", "1"], &[("WORKLOAD_LINGER_MS", "500")]);
    assert_eq!(stdout.trim(), "workload: sequence iterations=1 calls=30");

    assert!(trainer.wait().unwrap().success());
    assert!(python.wait().unwrap().success());
    let stopped = agent.stop();
    assert!(stopped.status.success(), "{}", stopped.log);
    assert_eq!(stopped.assert_nothing_lost("cuda", "cuda"), 60);
    drop(cgroup);

    let lake = data.path().display();
    let cuda = duckdb(&format!(
        "select pid, coalesce(pod_namespace, '-'), coalesce(pod_name, '-'), \
         coalesce(pod_uid, '-'), coalesce(container_id, '-'), count(*), \
         count(*) filter (where result <> 0) \
         from read_parquet('{lake}/cuda/**/*.parquet') group by all order by count(*) filter (where pod_uid is null)"
    ));
    assert_eq!(
        cuda,
        [
            [
                trainer_pid.to_string(),
                NAMESPACE.into(),
                POD.into(),
                uid.clone(),
                container.clone(),
                "30".into(),
                "2".into()
            ],
            [
                host_pid.to_string(),
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
                "30".into(),
                "1".into()
            ],
        ]
    );

    let xid = duckdb(&format!(
        "select code, pid, attribution, pod_namespace, pod_name, pod_uid, container_id \
         from read_parquet('{lake}/xid/**/*.parquet') where pci_bus_id = '0000:6e:00.0'"
    ));
    assert_eq!(
        xid,
        [[
            "31".to_string(),
            trainer_pid.to_string(),
            "driver_log".into(),
            NAMESPACE.into(),
            POD.into(),
            uid.clone(),
            container.clone()
        ]]
    );

    let driver = duckdb(&format!(
        "select pod_namespace, pod_name, pod_uid, container_id, \
         count(*) filter (where request_name = 'NV_ESC_RM_CONTROL') \
         from read_parquet('{lake}/driver/**/*.parquet') where pid = {python_pid} group by all"
    ));
    assert_eq!(
        driver,
        [[
            NAMESPACE.to_string(),
            POD.into(),
            uid.clone(),
            container.clone(),
            "3".into()
        ]]
    );

    let per_pod = duckdb(&rca_query("pods", "gpuship-data", &lake.to_string()));
    assert_eq!(
        per_pod,
        [[
            NAMESPACE.to_string(),
            POD.into(),
            "30".into(),
            "2".into(),
            "31".into()
        ]]
    );

    // The views name the pod too: the report's incident row and the trace's XID event.
    let out = tempfile::tempdir().unwrap();
    let (page, trace) = (
        out.path().join("report.html"),
        out.path().join("trace.json"),
    );
    for (view, output) in [("report", &page), ("export-trace", &trace)] {
        let run = Command::new(binary())
            .args([view, "--since", "30m", "--data"])
            .arg(data.path())
            .arg("--output")
            .arg(output)
            .env_remove("RUST_LOG")
            .output()
            .unwrap();
        assert!(
            run.status.success(),
            "{}",
            String::from_utf8_lossy(&run.stderr)
        );
    }
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(
        html.contains(&format!(
            "{trainer_pid} cuda_workload (pod {NAMESPACE}/{POD})"
        )),
        "no pod in the incident table"
    );
    let trace: serde_json::Value = serde_json::from_slice(&std::fs::read(&trace).unwrap()).unwrap();
    let pods: Vec<&serde_json::Value> = trace["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "i" && e["args"]["pci_bus_id"] == "0000:6e:00.0")
        .map(|e| &e["args"]["pod"])
        .collect();
    assert_eq!(pods, [&serde_json::json!(format!("{NAMESPACE}/{POD}"))]);
}
