//! Kernel names on launch rows, on real eBPF with the stand-in library: the handles a process
//! makes with `cuLibraryGetKernel`, `cuModuleGetFunction` and `cuKernelGetFunction` name its
//! launches (mangled and demangled), an unload retires them before the driver reuses the
//! value, and a handle made before the agent started is `unknown` and counted.

use std::time::Duration;

use crate::support;
use crate::support::agent::{data_dir, Agent};
use crate::support::lake::duckdb;
use crate::support::Fixtures;

const HOSTILE: &str = "evil\n\u{1b}[31mname\"'../..";

pub(crate) fn rows(data: &std::path::Path, pid: u32) -> Vec<Vec<Option<String>>> {
    let script = format!(
        "select function, result_name, cast(handle as varchar), cast(parent_handle as varchar), \
         kernel_name, kernel_name_demangled, cast(grid_x as varchar) \
         from read_parquet('{}/cuda/**/*.parquet', hive_partitioning = true) \
         where pid = {pid} order by time_ns",
        data.display()
    );
    // duckdb() maps SQL NULL to the string "NULL"; keep NULLs distinct from text here.
    duckdb(&script)
        .into_iter()
        .map(|row| {
            row.into_iter()
                .map(|value| (value != "NULL").then_some(value))
                .collect()
        })
        .collect()
}

pub(crate) fn text(values: &[&str]) -> Vec<Option<String>> {
    values
        .iter()
        .map(|v| (*v != "null").then(|| v.to_string()))
        .collect()
}

#[test]
fn launch_rows_carry_the_names_of_their_kernels() {
    let _shared = support::shared();
    let fixtures = Fixtures::build();
    let data = data_dir();
    let agent = Agent::start(&fixtures.cuda_config(data.path(), r#"["default"]"#), &[]);
    // The process stays a moment after its calls: the 5,000-byte name, cut by the probe at
    // 4,095 bytes, is completed from its memory, which needs it alive.
    let (pid, stdout) = fixtures.run_workload(&["kernels"], &[("WORKLOAD_LINGER_MS", "3000")]);
    assert!(stdout.contains("calls=19"), "{stdout}");
    let stopped = agent.stop();
    assert!(stopped.status.success(), "{}", stopped.log);
    assert_eq!(stopped.assert_nothing_lost("cuda", "cuda"), 19);
    assert_eq!(stopped.ring("cuda")["unknown_kernel_launches"], 1);
    assert_eq!(stopped.ring("cuda")["kernel_names_dropped"], 0);
    let long = format!("long_{}", "x".repeat(4995));
    let fill = "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEESt5arrayIPcLm1EEEEviT0_T1_";
    let fill_demangled = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, (unsigned long)1> >(int, at::native::FillFunctor<float>, std::array<char*, (unsigned long)1>)";
    let (k0, k1, k2, k3, k4) = (
        "1795162112",
        "1795162368",
        "1795162624",
        "1795162880",
        "1795163136",
    );
    let f0 = "1795162113";
    let ok = "CUDA_SUCCESS";
    let expected: Vec<Vec<Option<String>>> = vec![
        text(&[
            "cuLibraryLoadData",
            ok,
            "19712",
            "null",
            "null",
            "null",
            "null",
        ]),
        text(&[
            "cuLibraryGetKernel",
            ok,
            k0,
            "19712",
            "_Z10wild_writePi",
            "wild_write(int*)",
            "null",
        ]),
        text(&[
            "cuLibraryGetKernel",
            ok,
            k1,
            "19712",
            fill,
            fill_demangled,
            "null",
        ]),
        text(&[
            "cuLibraryGetKernel",
            ok,
            k2,
            "19712",
            HOSTILE,
            HOSTILE,
            "null",
        ]),
        text(&["cuLibraryGetKernel", ok, k3, "19712", &long, &long, "null"]),
        text(&[
            "cuKernelGetFunction",
            ok,
            f0,
            k0,
            "_Z10wild_writePi",
            "wild_write(int*)",
            "null",
        ]),
        text(&[
            "cuModuleLoadData",
            ok,
            "19713",
            "null",
            "null",
            "null",
            "null",
        ]),
        text(&[
            "cuModuleGetFunction",
            ok,
            k4,
            "19713",
            "plain_c_kernel",
            "plain_c_kernel",
            "null",
        ]),
        text(&[
            "cuLaunchKernel",
            ok,
            f0,
            "null",
            "_Z10wild_writePi",
            "wild_write(int*)",
            "1",
        ]),
        text(&["cuLaunchKernel", ok, k1, "null", fill, fill_demangled, "2"]),
        text(&["cuLaunchKernelEx", ok, k2, "null", HOSTILE, HOSTILE, "3"]),
        text(&["cuLaunchKernel_ptsz", ok, k3, "null", &long, &long, "4"]),
        text(&[
            "cuLaunchKernel",
            ok,
            k4,
            "null",
            "plain_c_kernel",
            "plain_c_kernel",
            "5",
        ]),
        text(&[
            "cuLibraryUnload",
            ok,
            "19712",
            "null",
            "null",
            "null",
            "null",
        ]),
        text(&[
            "cuModuleUnload",
            ok,
            "19713",
            "null",
            "null",
            "null",
            "null",
        ]),
        text(&[
            "cuLibraryLoadData",
            ok,
            "19714",
            "null",
            "null",
            "null",
            "null",
        ]),
        // The unloaded kernel's handle value, reused: named after its new kernel.
        text(&[
            "cuLibraryGetKernel",
            ok,
            k0,
            "19714",
            "_Z6reusedv",
            "reused()",
            "null",
        ]),
        text(&[
            "cuLaunchKernel",
            ok,
            k0,
            "null",
            "_Z6reusedv",
            "reused()",
            "6",
        ]),
        text(&[
            "cuLaunchKernel",
            ok,
            "14593280",
            "null",
            "unknown",
            "unknown",
            "7",
        ]),
    ];
    let got = rows(data.path(), pid);
    assert_eq!(got.len(), expected.len(), "{got:?}");
    for (index, (got, expected)) in got.iter().zip(&expected).enumerate() {
        assert_eq!(got, expected, "row {index}");
    }
}

#[test]
fn a_handle_made_before_the_agent_started_is_unknown_and_counted() {
    let _shared = support::shared();
    let fixtures = Fixtures::build();
    let data = data_dir();
    let go = data.path().join("go");
    let mut workload = fixtures
        .workload(&["kernels-late", go.to_str().expect("utf-8 path")])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("starting the workload");
    let pid = workload.id();
    let mut stdout = std::io::BufReader::new(workload.stdout.take().expect("stdout"));
    let mut ready = String::new();
    std::io::BufRead::read_line(&mut stdout, &mut ready).expect("reading the workload");
    assert_eq!(ready.trim(), "workload: ready early=0x6b000000");
    let agent = Agent::start(&fixtures.cuda_config(data.path(), r#"["default"]"#), &[]);
    std::fs::write(&go, b"").expect("opening the gate");
    let status = workload.wait().expect("waiting for the workload");
    assert!(status.success(), "{status:?}");
    std::thread::sleep(Duration::from_millis(300));
    let stopped = agent.stop();
    assert!(stopped.status.success(), "{}", stopped.log);
    assert_eq!(stopped.assert_nothing_lost("cuda", "cuda"), 4);
    assert_eq!(stopped.ring("cuda")["unknown_kernel_launches"], 2);
    let ok = "CUDA_SUCCESS";
    assert_eq!(
        rows(data.path(), pid),
        vec![
            text(&[
                "cuLaunchKernel",
                ok,
                "1795162112",
                "null",
                "unknown",
                "unknown",
                "1"
            ]),
            text(&[
                "cuLaunchKernel",
                ok,
                "1795162112",
                "null",
                "unknown",
                "unknown",
                "1"
            ]),
            text(&[
                "cuLibraryGetKernel",
                ok,
                "1795162368",
                "19712",
                "_Z4latev",
                "late()",
                "null"
            ]),
            text(&[
                "cuLaunchKernel",
                ok,
                "1795162368",
                "null",
                "_Z4latev",
                "late()",
                "1"
            ]),
        ]
    );
    assert!(
        stopped
            .log
            .contains("launch of a kernel handle made before the agent started"),
        "{}",
        stopped.log
    );
}
