//! The `jsonl` sink as people use it with jq: one JSON object per event on stdout (or in a
//! file), with the Parquet column names and a leading `kind`.

use std::time::Duration;

use crate::support;
use crate::support::agent::{data_dir, Agent};
use crate::support::Fixtures;

#[test]
fn every_call_is_one_json_line_on_stdout_and_in_a_file() {
    let _shared = support::shared();
    let fixtures = Fixtures::build();
    let data = data_dir();
    let file = data.path().join("events.jsonl");
    let config = fixtures.cuda_config(data.path(), r#"["default"]"#).replace(
        &format!(
            "[[sinks]]\ntype = \"parquet\"\npath = \"{}\"\n",
            data.path().display()
        ),
        &format!(
            "[[sinks]]\ntype = \"jsonl\"\nname = \"stdout\"\n\n\
             [[sinks]]\ntype = \"jsonl\"\nname = \"file\"\npath = \"{}\"\n",
            file.display()
        ),
    );
    let agent = Agent::start(&config, &[]);
    let (pid, _) = fixtures.run_workload(
        &["sequence", "1"],
        &[("FAKE_CUDA_RESULTS", "cuCtxSynchronize=700")],
    );
    agent.wait_for_log("\"function\":\"cuCtxDestroy_v2\"", Duration::from_secs(10));
    let stopped = agent.stop();
    assert!(stopped.status.success(), "{}", stopped.log);
    let from_stdout: Vec<serde_json::Value> = stopped
        .log
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).expect("each stdout line is one JSON object"))
        .collect();
    let from_file: Vec<serde_json::Value> = std::fs::read_to_string(&file)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    for lines in [&from_stdout, &from_file] {
        assert_eq!(lines.len(), 28);
        assert!(lines.iter().all(|l| l["kind"] == "cuda" && l["pid"] == pid));
        let failed: Vec<(&str, u64)> = lines
            .iter()
            .filter(|l| l["result"] != 0)
            .map(|l| {
                (
                    l["function"].as_str().unwrap(),
                    l["result"].as_u64().unwrap(),
                )
            })
            .collect();
        assert_eq!(failed, [("cuMemAlloc_v2", 2), ("cuCtxSynchronize", 700)]);
        let alloc = lines
            .iter()
            .find(|l| l["function"] == "cuMemAlloc_v2" && l["bytes"] == 1_048_576)
            .expect("the 1 MiB allocation");
        assert_eq!(alloc["result_name"], "CUDA_SUCCESS");
        assert!(alloc["device_ptr"].as_u64().unwrap() > 0);
        assert!(alloc["time"].as_str().unwrap().ends_with('Z'));
    }
    for name in ["stdout", "file"] {
        let sink = stopped.sink_named(name, "cuda");
        assert_eq!(sink["delivered"], 28, "{sink}");
    }
}
