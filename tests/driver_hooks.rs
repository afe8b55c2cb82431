//! Driver hooks without kprobes: ioctls on the kept device files come out as `driver` rows with
//! the decoded request (here /dev/null stands in for an NVIDIA device file: a character device
//! whose major the test names), and a kernel function timed through fentry/fexit after its
//! first alternative fails. `doctor` explains every driver probe that cannot attach here.

use std::process::Command;
use std::time::Duration;

use crate::support;
use crate::support::agent::{binary, data_dir, Agent};
use crate::support::lake::read_table;
use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, Int64Type, UInt32Type, UInt64Type};
use arrow_array::Array;

/// Five NV_ESC_RM_CONTROL and three NV_ESC_RM_ALLOC requests on /dev/null (each fails ENOTTY).
const IOCTLS: &str = r#"
import errno, fcntl, os
fd = os.open("/dev/null", os.O_RDONLY)
for request, size, times in [(0xC020462A, 32, 5), (0xC030462B, 48, 3)]:
    for _ in range(times):
        try:
            fcntl.ioctl(fd, request, bytes(size))
        except OSError as err:
            assert err.errno == errno.ENOTTY, err
print(os.getpid())
"#;

#[test]
fn ioctls_on_kept_devices_and_a_timed_kernel_function_become_driver_rows() {
    let _alone = support::exclusive();
    let data = data_dir();
    let config = format!(
        "[agent]\nprogress_interval_secs = 1\n\n[sources.xid]\ntracepoint = false\nkmsg = true\n\n\
         [sources.cuda]\nenabled = false\n\n\
         [sources.driver]\nioctl = true\ndevice_majors = [1]\n\
         functions = [\"gpuship_no_such_function|__x64_sys_ioctl\"]\n\n\
         [batch]\ntimeout_ms = 100\n\n[[sinks]]\ntype = \"parquet\"\npath = \"{}\"\n",
        data.path().display()
    );
    let agent = Agent::start(&config, &[]);
    assert!(
        agent.log().contains("driver hooks attached"),
        "{}",
        agent.log()
    );
    let output = Command::new("python3")
        .arg("-c")
        .arg(IOCTLS)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let pid: i32 = String::from_utf8_lossy(&output.stdout)
        .trim()
        .parse()
        .unwrap();
    // An XID that names the process, for the driver join of docs/rca.md.
    support::kmsg(&format!(
        "<4>NVRM: Xid (PCI:0000:3b:00): 31, pid={pid}, name=python3, channel 0x00000008, intr 00000000. MMU Fault: ENGINE GRAPHICS GPC0 GPCCLIENT_T1_0 faulted @ 0x7f01_00000000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ"
    ));
    agent.wait_for_log("code=31", Duration::from_secs(10));
    std::thread::sleep(Duration::from_millis(500));
    let stopped = agent.stop();
    assert!(stopped.status.success(), "{}", stopped.log);
    let ring = stopped.ring("driver");
    assert_eq!(ring["lost_in_kernel"], 0);
    assert_eq!(ring["decode_errors"], 0);
    assert_eq!(ring["emitted"], ring["received"]);
    let sink = stopped.sink("driver");
    assert_eq!(sink["delivered"], sink["received"]);

    let mut ioctls = Vec::new();
    let mut function_calls = 0;
    for batch in read_table(data.path(), "driver") {
        let text = |name: &str| {
            batch
                .column_by_name(name)
                .unwrap()
                .as_string::<i32>()
                .clone()
        };
        let (hook, device, name, dir) = (
            text("hook"),
            text("device"),
            text("request_name"),
            text("request_dir"),
        );
        let pids = batch
            .column_by_name("pid")
            .unwrap()
            .as_primitive::<Int32Type>()
            .clone();
        let u32s = |name: &str| {
            batch
                .column_by_name(name)
                .unwrap()
                .as_primitive::<UInt32Type>()
                .clone()
        };
        let (major, minor, request, size) = (
            u32s("major"),
            u32s("minor"),
            u32s("request"),
            u32s("request_size"),
        );
        let result = batch
            .column_by_name("result")
            .unwrap()
            .as_primitive::<Int64Type>()
            .clone();
        let duration = batch
            .column_by_name("duration_ns")
            .unwrap()
            .as_primitive::<UInt64Type>()
            .clone();
        for i in 0..batch.num_rows() {
            if pids.value(i) != pid {
                continue;
            }
            assert!(duration.value(i) > 0);
            match hook.value(i) {
                "ioctl" => ioctls.push((
                    device.value(i).to_string(),
                    major.value(i),
                    minor.value(i),
                    request.value(i),
                    name.value(i).to_string(),
                    dir.value(i).to_string(),
                    size.value(i),
                    result.value(i),
                )),
                "__x64_sys_ioctl" => {
                    assert!(name.is_null(i) && device.is_null(i));
                    function_calls += 1;
                }
                other => panic!("unexpected hook {other}"),
            }
        }
    }
    let control = (
        "null".to_string(),
        1,
        3,
        0xC020_462A,
        "NV_ESC_RM_CONTROL".to_string(),
        "read_write".to_string(),
        32,
        -25,
    );
    let alloc = (
        "null".to_string(),
        1,
        3,
        0xC030_462B,
        "NV_ESC_RM_ALLOC".to_string(),
        "read_write".to_string(),
        48,
        -25,
    );
    let mut expected = vec![control; 5];
    expected.extend(vec![alloc; 3]);
    // Python's own start-up asks its standard streams (here /dev/null) whether they are
    // terminals: TCGETS (0x5401), decoded but not named.
    let (named, others): (Vec<_>, Vec<_>) = ioctls.into_iter().partition(|r| !r.4.is_empty());
    assert_eq!(named, expected);
    assert!(!others.is_empty());
    assert!(others
        .iter()
        .all(|r| r.3 == 0x5401 && r.5 == "none" && r.6 == 0 && r.7 == -25));
    // docs/rca.md's driver join: the process's named escapes in the minute before its XID.
    let sql = support::lake::rca_query(
        "driver_before_xid",
        "gpuship-data",
        &data.path().display().to_string(),
    );
    let rows: Vec<Vec<String>> = support::lake::duckdb(&sql)
        .into_iter()
        .map(|r| r[..5].to_vec())
        .collect();
    let row = |name: &str, n: &str| {
        ["31", &pid.to_string(), name, n, n]
            .map(str::to_string)
            .to_vec()
    };
    assert_eq!(
        rows,
        [row("NV_ESC_RM_ALLOC", "3"), row("NV_ESC_RM_CONTROL", "5")]
    );

    // The function hook: its first alternative does not exist; the second attaches where the
    // kernel allows fentry (then Python's eight ioctls are among its calls), else the reason says
    // why not, and no function rows appear.
    let status = stopped.outcome["sources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s[0] == "driver_function")
        .expect("driver_function status")
        .clone();
    let detail = status[2].as_str().unwrap();
    if status[1] == true {
        assert_eq!(
            detail,
            "gpuship_no_such_function|__x64_sys_ioctl: __x64_sys_ioctl"
        );
        assert!(function_calls >= 8, "{function_calls}");
    } else {
        assert!(
            detail.starts_with("gpuship_no_such_function|__x64_sys_ioctl: gpuship_no_such_function is not in the kernel or any loaded module"),
            "{detail}"
        );
        assert!(
            detail.contains(
                "the kernel refused to load a tracing program for __x64_sys_ioctl (EPERM)"
            ) || detail.contains("__x64_sys_ioctl is in /proc/kallsyms but cannot be traced"),
            "{detail}"
        );
        assert_eq!(function_calls, 0);
    }
}

#[test]
fn doctor_explains_each_driver_probe() {
    let _shared = support::shared();
    let output = Command::new(binary())
        .args(["doctor", "--json"])
        .output()
        .unwrap();
    let checks: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let check = |probe: &str| -> serde_json::Value {
        checks
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["probe"] == probe)
            .unwrap_or_else(|| panic!("no check {probe} in {checks}"))
            .clone()
    };
    let ioctl = check("driver_ioctl");
    assert_eq!(ioctl["ok"], false);
    assert_eq!(
        ioctl["required"], false,
        "auto majors on a host without the driver is fine"
    );
    assert_eq!(
        ioctl["detail"],
        "no NVIDIA character devices in /proc/devices (driver not loaded)"
    );
    for function in [
        "nvidia_unlocked_ioctl",
        "nvidia_isr_kthread_bh",
        "uvm_parent_gpu_service_replayable_faults",
    ] {
        let check = check(&format!("driver:{function}"));
        assert_eq!(check["ok"], false);
        assert_eq!(check["required"], false);
        assert_eq!(
            check["detail"],
            format!("{function} is not in the kernel or any loaded module (module not loaded, renamed in this driver version, or inlined)")
        );
    }
    assert_eq!(check("kptr_restrict")["ok"], true);
}
