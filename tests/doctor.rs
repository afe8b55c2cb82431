//! `gpuship doctor` on this machine (no NVIDIA driver, no kprobes, uprobes and BTF present):
//! each verdict checked in its JSON output, and the exit status.

use std::collections::BTreeMap;
use std::process::Command;

use crate::support;
use crate::support::agent::binary;
use crate::support::Fixtures;

fn doctor(config: &str) -> (i32, BTreeMap<String, serde_json::Value>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("doctor.toml");
    std::fs::write(&path, config).unwrap();
    let output = Command::new(binary())
        .args(["--log-level=warn", "doctor", "--json", "--config"])
        .arg(&path)
        .output()
        .expect("gpuship doctor");
    let checks: Vec<serde_json::Value> = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&output.stdout)));
    let by_probe = checks
        .into_iter()
        .map(|c| (c["probe"].as_str().unwrap().to_string(), c))
        .collect();
    (output.status.code().unwrap_or(-1), by_probe)
}

#[test]
fn every_probe_gets_the_right_verdict_here() {
    let _shared = support::shared();
    let fixtures = Fixtures::build();
    let config = format!(
        "[sources.cuda]\nlibraries = [\"{}\"]\n",
        fixtures.libcuda.display()
    );
    let (code, checks) = doctor(&config);
    let verdict = |probe: &str| {
        let check = checks
            .get(probe)
            .unwrap_or_else(|| panic!("no check {probe}: {checks:?}"));
        (
            check["ok"].as_bool().unwrap(),
            check["required"].as_bool().unwrap(),
        )
    };
    assert_eq!(verdict("capabilities"), (true, true));
    assert_eq!(verdict("kernel_btf"), (true, true));
    assert_eq!(verdict("tracefs"), (true, true));
    assert_eq!(verdict("kmsg"), (true, true));
    assert_eq!(verdict("cuda"), (true, true));
    assert_eq!(
        checks["cuda"]["detail"],
        "60 symbols in 1 library attached and detached"
    );
    // The stand-in exports neither of these two default functions: informational only.
    assert_eq!(verdict("cuda:cuMemcpy"), (false, false));
    assert_eq!(verdict("cuda:cuMemcpyDtoDAsync_v2"), (false, false));
    let xid = "xid_tracepoint nvidia:nvidia_dev_xid";
    assert_eq!(verdict(xid), (false, true));
    assert!(checks[xid]["detail"]
        .as_str()
        .unwrap()
        .contains("is not present"));
    assert!(checks[xid]["fix"]
        .as_str()
        .unwrap()
        .contains("load the NVIDIA kernel driver"));
    assert_eq!(verdict("kprobes"), (false, false));
    assert!(checks["kprobes"]["detail"]
        .as_str()
        .unwrap()
        .contains("CONFIG_KPROBES"));
    assert_eq!(verdict("nvidia_module_btf"), (false, false));
    assert!(checks["nvidia_module_btf"]["fix"]
        .as_str()
        .unwrap()
        .contains("modprobe nvidia"));
    // No NVIDIA module here: every driver function is absent, and its fix says what to do
    // about an absent function (a refusal would be told about lockdown or the policy instead).
    let driver_functions: Vec<_> = checks
        .iter()
        .filter(|(probe, _)| probe.starts_with("driver:"))
        .collect();
    assert!(!driver_functions.is_empty(), "{checks:?}");
    for (probe, check) in driver_functions {
        let (detail, fix) = (
            check["detail"].as_str().unwrap(),
            check["fix"].as_str().unwrap(),
        );
        assert!(
            detail.contains("is not in the kernel or any loaded module"),
            "{probe}: {detail}"
        );
        assert!(
            fix.contains("this driver version's function"),
            "{probe}: {fix}"
        );
        assert!(!fix.contains("lockdown"), "{probe}: {fix}");
    }
    assert_eq!(code, 1, "the configured XID tracepoint cannot run here");
}

#[test]
fn the_exit_status_is_zero_when_every_configured_source_can_run() {
    let _shared = support::shared();
    let fixtures = Fixtures::build();
    let config = format!(
        "[sources.xid]\ntracepoint = false\n\n[sources.cuda]\nlibraries = [\"{}\"]\n",
        fixtures.libcuda.display()
    );
    let (code, checks) = doctor(&config);
    assert_eq!(
        checks["xid_tracepoint nvidia:nvidia_dev_xid"]["detail"],
        "disabled in config"
    );
    assert_eq!(code, 0);
}
