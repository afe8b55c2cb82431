//! Real eBPF on a stand-in libcuda built with `-fcf-protection=full`, where every function
//! starts with `endbr64` (an instruction the kernel single-steps at a uprobe, a second trap per
//! call): the agent probes each function past it, and every call of the workload is still one
//! exact row, register and stack arguments, out-pointers and results alike.

use crate::cuda_capture::{expected_sequence, NAMED_EXTRAS};
use crate::support;
use crate::support::agent::{data_dir, Agent};
use crate::support::cuda_rows::rows;
use crate::support::lake::read_table;
use crate::support::Fixtures;

/// The value of `field=` in the agent's log line that contains `message`.
fn logged(log: &str, message: &str, field: &str) -> u64 {
    let line = log
        .lines()
        .find(|line| line.contains(message))
        .unwrap_or_else(|| panic!("no {message:?} in:\n{log}"));
    let start = line
        .find(&format!(" {field}="))
        .unwrap_or_else(|| panic!("no {field} in {line}"))
        + field.len()
        + 2;
    line[start..]
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .and_then(|digits| digits.parse().ok())
        .unwrap_or_else(|| panic!("{field} is no number in {line}"))
}

#[test]
fn a_library_built_with_cet_is_probed_past_endbr64_with_the_same_exact_rows() {
    let _shared = support::shared();
    let fixtures = Fixtures::build();
    let cet = fixtures.dir.path().join("cet/libcuda.so.1");
    let data = data_dir();
    let config = fixtures.cuda_config(data.path(), NAMED_EXTRAS).replace(
        &fixtures.libcuda.display().to_string(),
        &cet.display().to_string(),
    );
    let agent = Agent::start(&config, &[]);
    let log = agent.log();
    let symbols = logged(&log, "CUDA uprobes attached", "symbols");
    assert!(symbols > 30, "{log}");
    assert_eq!(
        logged(&log, "CUDA uprobes attached", "past_endbr64"),
        symbols
    );
    assert_eq!(logged(&log, "CUDA uprobes attached", "single_stepped"), 0);
    assert!(!log.contains("single-steps"), "{log}");

    let cet_path = cet.display().to_string();
    let (pid, stdout) = fixtures.run_workload(
        &["sequence", "2"],
        &[
            ("CUDA_LIB", cet_path.as_str()),
            ("FAKE_CUDA_RESULTS", "cuCtxSynchronize=700"),
        ],
    );
    assert_eq!(stdout.trim(), "workload: sequence iterations=2 calls=60");
    let stopped = agent.stop();
    assert!(stopped.status.success(), "{}", stopped.log);
    assert_eq!(stopped.assert_nothing_lost("cuda", "cuda"), 60);
    let rows = rows(&read_table(data.path(), "cuda"));
    assert!(rows
        .iter()
        .all(|r| r.pid == pid as i32 && r.duration_ns > 0));
    let calls: Vec<_> = rows.into_iter().map(|r| r.call).collect();
    assert_eq!(calls, expected_sequence(2));
}

#[test]
fn the_default_library_is_probed_where_its_functions_start() {
    let _shared = support::shared();
    let fixtures = Fixtures::build();
    let data = data_dir();
    let agent = Agent::start(&fixtures.cuda_config(data.path(), NAMED_EXTRAS), &[]);
    let log = agent.log();
    assert_eq!(logged(&log, "CUDA uprobes attached", "past_endbr64"), 0);
    assert_eq!(logged(&log, "CUDA uprobes attached", "single_stepped"), 0);
    let stopped = agent.stop();
    assert!(stopped.status.success(), "{}", stopped.log);
}
