//! XIDs written to /dev/kmsg in the driver's real formats come out as `xid` rows with the
//! right code, bus id, process and GPU; a malformed XID line is counted and loses nothing else.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::support;
use crate::support::agent::{data_dir, Agent};
use crate::support::kmsg;
use crate::support::lake::{duckdb, read_table};
use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, UInt32Type, UInt64Type};
use arrow_array::Array;

/// A fake /proc/driver/nvidia/gpus with two GPUs.
fn gpu_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (bus, uuid, model) in [
        (
            "0000:3b:00.0",
            "GPU-3b3b3b3b-0000-1111-2222-333333333333",
            "NVIDIA H100 80GB HBM3",
        ),
        (
            "0000:00:06.0",
            "GPU-06060606-0000-1111-2222-333333333333",
            "NVIDIA H200",
        ),
    ] {
        std::fs::create_dir_all(dir.path().join(bus)).unwrap();
        std::fs::write(
            dir.path().join(bus).join("information"),
            format!("Model: \t\t {model}\nIRQ:   \t\t 35\nGPU UUID: \t {uuid}\nBus Location: \t {bus}\nDevice Minor: \t 0\n"),
        )
        .unwrap();
    }
    dir
}

#[derive(Debug, PartialEq, Eq)]
struct XidRow {
    code: u32,
    pci_bus_id: String,
    pid: Option<i32>,
    comm: Option<String>,
    gpu_uuid: Option<String>,
    gpu_index: Option<i32>,
    message: String,
    source: String,
}

#[test]
fn kernel_log_xids_in_every_driver_format_become_rows() {
    let _alone = support::exclusive();
    let data = data_dir();
    let gpus = gpu_dir();
    let config = format!(
        "[sources.xid]\ntracepoint = false\nkmsg = true\n\n[sources.cuda]\nenabled = false\n\n\
         [enrich]\nnvidia_proc_dir = \"{}\"\n\n[[sinks]]\ntype = \"parquet\"\npath = \"{}\"\n",
        gpus.path().display(),
        data.path().display()
    );
    let agent = Agent::start(&config, &[]);
    let lines = [
        "<3>NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, GPU has fallen off the bus.",
        "<4>NVRM: Xid (PCI:0000:00:06): 31, pid=468, name=python3, channel 0x0000000a, intr 00000000. MMU Fault: ENGINE GRAPHICS GPC1 GPCCLIENT_T1_8 faulted @ 0x7f00_00000000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_WRITE",
        "<4>NVRM: Xid (PCI:0000:ca:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
        "<4>NVRM: Xid (PCI:0000:3B:00): 48, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 6, subpartition 0.",
        "<4>NVRM: Xid (PCI:0000:86:00.0): 94, pid=2112, name=pt_main_thread, Ch 00000008, errorString CTX SWITCH TIMEOUT, Info 0x2c003",
        "<4>NVRM: Xid (0000:03:00): 13, 0001 00000000 000090c0 00001b0c 00000000 00000000",
        // Malformed: counted as a parse error, and the lines after it still arrive.
        "<4>NVRM: Xid (PCI:0000:3b:00): seventy-nine, garbage",
        "<6>NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  580.159.04",
        "<4>NVRM: Xid (PCI:0000:00:06): 172, pid=77, name=trainer, Uncontained error",
    ];
    for line in lines {
        kmsg(line);
    }
    agent.wait_for_log("code=172", Duration::from_secs(10));
    let stopped = agent.stop();
    assert!(stopped.status.success(), "{}", stopped.log);
    assert_eq!(stopped.outcome["accounting"]["kmsg"]["xids"], 7);
    assert_eq!(stopped.outcome["accounting"]["kmsg"]["parse_errors"], 1);
    assert!(
        stopped.log.contains("seventy-nine"),
        "the bad line is quoted in the log:\n{}",
        stopped.log
    );
    let sink = stopped.sink("xid");
    assert_eq!(
        (sink["received"].as_u64(), sink["delivered"].as_u64()),
        (Some(7), Some(7))
    );

    let mut rows = Vec::new();
    let mut seqs = Vec::new();
    for batch in read_table(data.path(), "xid") {
        let s = |name: &str| {
            batch
                .column_by_name(name)
                .unwrap()
                .as_string::<i32>()
                .clone()
        };
        let (bus, comm, uuid, message, source) = (
            s("pci_bus_id"),
            s("comm"),
            s("gpu_uuid"),
            s("message"),
            s("source"),
        );
        let code = batch
            .column_by_name("code")
            .unwrap()
            .as_primitive::<UInt32Type>()
            .clone();
        let pid = batch
            .column_by_name("pid")
            .unwrap()
            .as_primitive::<Int32Type>()
            .clone();
        let index = batch
            .column_by_name("gpu_index")
            .unwrap()
            .as_primitive::<Int32Type>()
            .clone();
        let seq = batch
            .column_by_name("kmsg_seq")
            .unwrap()
            .as_primitive::<UInt64Type>()
            .clone();
        for i in 0..batch.num_rows() {
            seqs.push(seq.value(i));
            rows.push(XidRow {
                code: code.value(i),
                pci_bus_id: bus.value(i).to_string(),
                pid: (!pid.is_null(i)).then(|| pid.value(i)),
                comm: (!comm.is_null(i)).then(|| comm.value(i).to_string()),
                gpu_uuid: (!uuid.is_null(i)).then(|| uuid.value(i).to_string()),
                gpu_index: (!index.is_null(i)).then(|| index.value(i)),
                message: message.value(i).to_string(),
                source: source.value(i).to_string(),
            });
        }
    }
    let mut order: Vec<usize> = (0..rows.len()).collect();
    order.sort_by_key(|&i| seqs[i]);
    let rows: Vec<XidRow> = order
        .into_iter()
        .map(|i| {
            std::mem::replace(
                &mut rows[i],
                XidRow {
                    code: 0,
                    pci_bus_id: String::new(),
                    pid: None,
                    comm: None,
                    gpu_uuid: None,
                    gpu_index: None,
                    message: String::new(),
                    source: String::new(),
                },
            )
        })
        .collect();
    let h100 = Some("GPU-3b3b3b3b-0000-1111-2222-333333333333".to_string());
    let h200 = Some("GPU-06060606-0000-1111-2222-333333333333".to_string());
    let row = |code,
               bus: &str,
               pid,
               comm: Option<&str>,
               gpu_uuid: &Option<String>,
               gpu_index,
               message: &str| XidRow {
        code,
        pci_bus_id: bus.into(),
        pid,
        comm: comm.map(String::from),
        gpu_uuid: gpu_uuid.clone(),
        gpu_index,
        message: message.into(),
        source: "kmsg".into(),
    };
    let expected = vec![
        row(79, "0000:3b:00.0", Some(1234), Some("python3"), &h100, Some(1), "GPU has fallen off the bus."),
        row(31, "0000:00:06.0", Some(468), Some("python3"), &h200, Some(0), "channel 0x0000000a, intr 00000000. MMU Fault: ENGINE GRAPHICS GPC1 GPCCLIENT_T1_8 faulted @ 0x7f00_00000000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_WRITE"),
        row(79, "0000:ca:00.0", None, None, &None, None, "GPU has fallen off the bus."),
        row(48, "0000:3b:00.0", None, None, &h100, Some(1), "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 6, subpartition 0."),
        row(94, "0000:86:00.0", Some(2112), Some("pt_main_thread"), &None, None, "Ch 00000008, errorString CTX SWITCH TIMEOUT, Info 0x2c003"),
        row(13, "0000:03:00.0", None, None, &None, None, "0001 00000000 000090c0 00001b0c 00000000 00000000"),
        row(172, "0000:00:06.0", Some(77), Some("trainer"), &h200, Some(0), "Uncontained error"),
    ];
    assert_eq!(rows, expected);

    // The analyst's first query: XIDs per GPU and code, straight from the files.
    let glob = format!("{}/xid/**/*.parquet", data.path().display());
    let per_gpu = duckdb(&format!(
        "select coalesce(gpu_uuid, pci_bus_id), list(code order by kmsg_seq), min(typeof(time)) \
         from read_parquet('{glob}', hive_partitioning=true) group by 1 order by 1"
    ));
    let tz = "TIMESTAMP WITH TIME ZONE".to_string();
    assert_eq!(
        per_gpu,
        vec![
            vec!["0000:03:00.0".to_string(), "[13]".into(), tz.clone()],
            vec!["0000:86:00.0".to_string(), "[94]".into(), tz.clone()],
            vec!["0000:ca:00.0".to_string(), "[79]".into(), tz.clone()],
            vec![
                "GPU-06060606-0000-1111-2222-333333333333".to_string(),
                "[31, 172]".into(),
                tz.clone()
            ],
            vec![
                "GPU-3b3b3b3b-0000-1111-2222-333333333333".to_string(),
                "[79, 48]".into(),
                tz
            ],
        ]
    );
}

fn unix_now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_nanos() as i64
}

/// The kernel log's clock drifts from CLOCK_MONOTONIC (8 ms behind on the CI VM after four
/// hours; seconds after weeks): an XID's time must be when it was logged all the same, or it
/// lands before the calls that preceded it.
#[test]
fn an_xid_from_the_kernel_log_is_dated_when_it_was_logged() {
    let _alone = support::exclusive();
    let data = data_dir();
    let config = format!(
        "[sources.xid]\ntracepoint = false\nkmsg = true\n\n[sources.cuda]\nenabled = false\n\n\
         [[sinks]]\ntype = \"parquet\"\npath = \"{}\"\n",
        data.path().display()
    );
    let agent = Agent::start(&config, &[]);
    // Records logged while the agent reads teach it the log clock's offset.
    for i in 0..3 {
        kmsg(&format!("<6>gpuship test: clock sample {i}"));
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut brackets = Vec::new();
    for code in [31u32, 43, 13] {
        let before = unix_now_ns();
        kmsg(&format!(
            "<4>NVRM: Xid (PCI:0000:3b:00): {code}, pid=1, name=x, clock test"
        ));
        let after = unix_now_ns();
        brackets.push((code, before, after));
        std::thread::sleep(Duration::from_millis(50));
    }
    agent.wait_for_log("code=13", Duration::from_secs(10));
    let stopped = agent.stop();
    assert!(stopped.status.success(), "{}", stopped.log);
    let mut times = BTreeMap::new();
    for batch in read_table(data.path(), "xid") {
        let codes = batch["code"].as_primitive::<UInt32Type>().clone();
        let time_ns = batch["time_ns"]
            .as_primitive::<arrow_array::types::Int64Type>()
            .clone();
        for row in 0..batch.num_rows() {
            times.insert(codes.value(row), time_ns.value(row));
        }
    }
    for (code, before, after) in brackets {
        let at = times[&code];
        // Logged between the two readings of the wall clock: 1 ms of slack for the wall
        // clock's own steps since the agent measured its offsets, and 5 ms above for the
        // agent's read of the log.
        assert!(
            at >= before - 1_000_000 && at <= after + 5_000_000,
            "XID {code} dated {} ms from its write (window {} ms)",
            (at - before) as f64 / 1e6,
            (after - before) as f64 / 1e6
        );
    }
}
