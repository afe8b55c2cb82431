//! The memory each process holds, on real eBPF with the stand-in library: allocations of every
//! kind on two devices become exact `cuda_memory` rows per (process, GPU) and kind, the
//! per-GPU gauge on `/metrics` shows the same sums, and an allocation that fails out of memory
//! carries what the process held on that GPU and its largest allocations.

use std::time::Duration;

use crate::support;
use crate::support::agent::{data_dir, Agent};
use crate::support::lake::{duckdb, fake_gpu_dir, rca_query};
use crate::support::metrics::scrape;
use crate::support::{wait_until, Fixtures};

/// The stand-in's UUIDs of devices 0 and 1 (fake_devices.c).
const UUID0: &str = "GPU-10111213-1415-1617-1819-1a1b1c1d1e1f";
const UUID1: &str = "GPU-20212223-2425-2627-2829-2a2b2c2d2e2f";

/// The stand-in's n-th allocation of a process (fake_control.c).
fn fake_pointer(n: u64) -> u64 {
    0x7f00_0000_0000 + n * 0x10_0000
}

fn gauge(bus: &str, index: u32, uuid: &str, kind: &str) -> String {
    format!(
        "gpuship_cuda_memory_held_bytes{{gpu_uuid=\"{uuid}\",pci_bus_id=\"{bus}\",gpu_index=\"{index}\",kind=\"{kind}\"}}"
    )
}

#[test]
fn held_bytes_per_process_gpu_and_kind_and_the_out_of_memory_row() {
    let _shared = support::shared();
    let fixtures = Fixtures::build();
    let data = data_dir();
    let gpus = fake_gpu_dir(
        "NVIDIA H100 80GB HBM3",
        &[(0, "0000:3b:00.0", UUID0), (1, "0000:86:00.0", UUID1)],
    );
    let config = format!(
        "{}\n[enrich]\nnvidia_proc_dir = \"{}\"\n\n[metrics]\naddress = \"127.0.0.1:0\"\n",
        fixtures.cuda_config(data.path(), r#"["default"]"#).replace(
            "drain_interval_ms = 20\n",
            "drain_interval_ms = 20\nstats_interval_secs = 1\n"
        ),
        gpus.path().display()
    );
    let agent = Agent::start(&config, &[]);
    let address = agent.metrics_address();
    let child = fixtures
        .workload(&["held"])
        .env("WORKLOAD_LINGER_MS", "4000")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("starting the workload");
    let pid = child.id();
    // While it lives, the gauge sums what it holds per GPU and kind.
    let (b0, b1) = ("0000:3b:00.0", "0000:86:00.0");
    let expected_gauges = [
        (gauge(b0, 0, UUID0, "device"), 3 << 20),
        (gauge(b0, 0, UUID0, "managed"), 64 << 10),
        (gauge(b0, 0, UUID0, "host_pinned"), 128 << 10),
        (gauge(b0, 0, UUID0, "pool"), 8 << 10),
        (gauge(b0, 0, UUID0, "physical"), 2 << 20),
        (gauge(b1, 1, UUID1, "device"), 2 << 20),
        (gauge(b1, 1, UUID1, "physical"), 0),
    ];
    let last = std::cell::RefCell::new(Default::default());
    wait_until(
        Duration::from_secs(4),
        "the memory gauges",
        || {
            let seen = scrape(&address);
            let done = expected_gauges
                .iter()
                .all(|(series, value)| seen.get(series) == Some(value));
            *last.borrow_mut() = seen;
            done
        },
        || format!("{expected_gauges:?} in {:#?}", last.borrow()),
    );
    let output = child.wait_with_output().expect("waiting for the workload");
    assert!(output.status.success());
    assert!(String::from_utf8_lossy(&output.stdout).contains("calls=21"));
    let stopped = agent.stop();
    assert!(stopped.status.success(), "{}", stopped.log);
    assert_eq!(stopped.assert_nothing_lost("cuda", "cuda"), 21);

    // The periodic rows: one per GPU, every interval while it lived; the latest are exact.
    let rows = duckdb(&format!(
        "select gpu_uuid, pci_bus_id, cast(gpu_index as varchar), cast(device_bytes as varchar), \
         cast(managed_bytes as varchar), cast(host_pinned_bytes as varchar), \
         cast(pool_bytes as varchar), cast(physical_bytes as varchar), \
         cast(allocations as varchar), cast(seen_from_start as varchar), comm \
         from read_parquet('{}/cuda_memory/**/*.parquet', hive_partitioning = true) \
         where pid = {pid} qualify row_number() over (partition by gpu_uuid order by time_ns desc) = 1 \
         order by gpu_uuid",
        data.path().display()
    ));
    let strings = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        rows,
        [
            strings(&[
                UUID0,
                b0,
                "0",
                &(3u64 << 20).to_string(),
                "65536",
                "131072",
                "8192",
                &(2u64 << 20).to_string(),
                "5",
                "true",
                "cuda_workload"
            ]),
            strings(&[
                UUID1,
                b1,
                "1",
                &(2u64 << 20).to_string(),
                "0",
                "0",
                "0",
                "0",
                "1",
                "true",
                "cuda_workload"
            ]),
        ]
    );

    // The failed allocation says what the process held on device 0 then, largest first.
    let oom = duckdb(&format!(
        "select cast(held_memory.device_bytes as varchar), cast(held_memory.physical_bytes as varchar), \
         cast(held_memory.seen_from_start as varchar), \
         array_to_string(list_transform(largest_allocations, a -> a.kind || ':' || a.bytes || ':' || a.address || ':' || a.function), ', ') \
         from read_parquet('{}/cuda/**/*.parquet', hive_partitioning = true) \
         where pid = {pid} and result_name = 'CUDA_ERROR_OUT_OF_MEMORY'",
        data.path().display()
    ));
    let largest = [
        format!("device:{}:{}:cuMemAlloc_v2", 3 << 20, fake_pointer(1)),
        format!("physical:{}:{}:cuMemCreate", 2 << 20, fake_pointer(6)),
        format!("host_pinned:131072:{}:cuMemHostAlloc", fake_pointer(3)),
        format!("managed:65536:{}:cuMemAllocManaged", fake_pointer(2)),
        format!("pool:8192:{}:cuMemAllocAsync", fake_pointer(4)),
    ];
    assert_eq!(
        oom,
        [strings(&[
            &(3u64 << 20).to_string(),
            &(2u64 << 20).to_string(),
            "true",
            &largest.join(", ")
        ])]
    );
    // docs/rca.md's queries read the same.
    let lake = data.path().display().to_string();
    let oom_query = duckdb(&rca_query("oom", "gpuship-data", &lake));
    assert_eq!(oom_query.len(), 1, "{oom_query:?}");
    assert_eq!(
        oom_query[0][5..],
        strings(&[
            UUID0,
            &((3u64 << 20) + 8192 + (2 << 20)).to_string(),
            "True",
            "device 3145728 by cuMemAlloc_v2, physical 2097152 by cuMemCreate, host_pinned 131072 by cuMemHostAlloc, managed 65536 by cuMemAllocManaged, pool 8192 by cuMemAllocAsync"
        ])[..]
    );
    let holders = duckdb(&rca_query("holders", "gpuship-data", &lake));
    assert_eq!(
        holders,
        [strings(&[
            &pid.to_string(),
            "cuda_workload",
            UUID0,
            &(3u64 << 20).to_string(),
            "8192",
            &(2u64 << 20).to_string(),
            "65536",
            "131072",
            "True"
        ])]
    );
    // Every other row has none.
    let others = duckdb(&format!(
        "select count(*) from read_parquet('{}/cuda/**/*.parquet', hive_partitioning = true) \
         where pid = {pid} and (held_memory is not null or largest_allocations is not null)",
        data.path().display()
    ));
    assert_eq!(others, [strings(&["1"])]);
}
