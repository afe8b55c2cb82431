//! The XID tracepoint program, run for real on a kernel without the NVIDIA driver.
//!
//! `sched:sched_process_fork` on this kernel has the same record shape as
//! `nvidia:nvidia_dev_xid` (a `__data_loc char[]` at 8, a 4-byte integer at 12, a
//! `__data_loc char[]` at 16), so pointing the program at it with the field-name mapping
//! exercises the real path: format-file parsing, rodata offsets, `__data_loc` string copies,
//! the woken ring, decoding and Parquet. The real tracepoint is proven on the GPU machine
//! (docs/gpu-verification.md).

use std::process::Command;

use crate::support;
use crate::support::agent::{data_dir, Agent};
use crate::support::lake::read_table;
use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, UInt32Type};

#[test]
fn the_xid_program_reads_data_loc_fields_of_a_live_tracepoint() {
    let _alone = support::exclusive();
    let data = data_dir();
    let config = format!(
        "[sources.xid]\ntracepoint = true\ntracepoint_name = \"sched:sched_process_fork\"\nkmsg = false\n\n\
         [sources.xid.tracepoint_fields]\ndev = \"parent_comm\"\nerror_code = \"parent_pid\"\nmsg = \"child_comm\"\n\n\
         [sources.cuda]\nenabled = false\n\n[[sinks]]\ntype = \"parquet\"\npath = \"{}\"\n",
        data.path().display()
    );
    let agent = Agent::start(&config, &[]);
    assert!(
        agent.log().contains("XID tracepoint attached"),
        "{}",
        agent.log()
    );
    // A shell with a recognizable name forks exactly three children.
    let dir = tempfile::tempdir().unwrap();
    let shell = dir.path().join("xidforker");
    std::fs::copy("/bin/sh", &shell).unwrap();
    let child = Command::new(&shell)
        .arg("-c")
        .arg("/bin/true; /bin/true; /bin/true; echo done")
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&child.stdout).trim(), "done");
    std::thread::sleep(std::time::Duration::from_millis(300));
    let stopped = agent.stop();
    let ring = stopped.ring("xid");
    assert_eq!(ring["lost_in_kernel"], 0);
    assert_eq!(ring["decode_errors"], 0);
    assert_eq!(ring["emitted"], ring["received"]);
    assert_eq!(
        stopped.sink("xid")["delivered"],
        stopped.sink("xid")["received"]
    );

    let mut ours = Vec::new();
    for batch in read_table(data.path(), "xid") {
        let bus = batch
            .column_by_name("pci_bus_id")
            .unwrap()
            .as_string::<i32>();
        let message = batch.column_by_name("message").unwrap().as_string::<i32>();
        let code = batch
            .column_by_name("code")
            .unwrap()
            .as_primitive::<UInt32Type>();
        let reporter = batch
            .column_by_name("reporter_pid")
            .unwrap()
            .as_primitive::<Int32Type>();
        let source = batch.column_by_name("source").unwrap().as_string::<i32>();
        for i in 0..batch.num_rows() {
            if bus.value(i) == "xidforker" {
                ours.push((
                    code.value(i),
                    message.value(i).to_string(),
                    reporter.value(i) as u32,
                    source.value(i).to_string(),
                ));
            }
        }
    }
    assert_eq!(ours.len(), 3, "{ours:?}");
    let shell_pid = ours[0].2;
    for (code, message, reporter, source) in &ours {
        // error_code <- parent_pid, msg <- child_comm (a fork child inherits the name).
        assert_eq!(
            (*code, message.as_str(), *reporter, source.as_str()),
            (shell_pid, "xidforker", shell_pid, "tracepoint")
        );
    }
}
