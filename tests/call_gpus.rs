//! The GPU of every CUDA call, on real eBPF with the stand-in library: one process asks for two
//! devices' UUIDs, makes a context on each and drives them from two threads (set, push, pop,
//! create, destroy); every row carries the GPU its thread's context is on, with the bus id and
//! index the driver's proc files give that UUID, and null where the agent cannot know.

use crate::support;
use crate::support::agent::{data_dir, Agent};
use crate::support::lake::{duckdb, fake_gpu_dir};
use crate::support::Fixtures;

/// The stand-in's UUIDs of devices 0 and 1 (fake_devices.c).
const UUID0: &str = "GPU-10111213-1415-1617-1819-1a1b1c1d1e1f";
const UUID1: &str = "GPU-20212223-2425-2627-2829-2a2b2c2d2e2f";

#[test]
fn every_row_carries_the_gpu_of_its_threads_context() {
    let _shared = support::shared();
    let fixtures = Fixtures::build();
    let data = data_dir();
    // Device 1 sorts first on the bus: nvidia-smi index 0. The proc files write UUIDs in
    // upper case on some drivers; a third GPU keeps the node from having a single one.
    let upper1 = UUID1.to_uppercase();
    let gpus = fake_gpu_dir(
        "NVIDIA H100 80GB HBM3",
        &[
            (1, "0000:86:00.0", UUID0),
            (0, "0000:3b:00.0", &upper1),
            (
                2,
                "0000:af:00.0",
                "GPU-99999999-9999-9999-9999-999999999999",
            ),
        ],
    );
    let config = format!(
        "{}\n[enrich]\nnvidia_proc_dir = \"{}\"\n",
        fixtures.cuda_config(data.path(), r#"["default"]"#),
        gpus.path().display()
    );
    let agent = Agent::start(&config, &[]);
    let (pid, stdout) = fixtures.run_workload(&["devices"], &[]);
    assert!(stdout.contains("calls=19"), "{stdout}");
    let stopped = agent.stop();
    assert!(stopped.status.success(), "{}", stopped.log);
    assert_eq!(stopped.assert_nothing_lost("cuda", "cuda"), 19);
    let rows: Vec<String> = duckdb(&format!(
        "select function, coalesce(gpu_uuid, 'null'), coalesce(pci_bus_id, 'null'), \
         coalesce(cast(gpu_index as varchar), 'null'), \
         case when tid = pid then 'main' else 'thread' end \
         from read_parquet('{}/cuda/**/*.parquet', hive_partitioning = true) \
         where pid = {pid} order by time_ns",
        data.path().display()
    ))
    .into_iter()
    .map(|row| row.join(" "))
    .collect();
    let (gpu0, gpu1) = (
        format!("{UUID0} 0000:86:00.0 1"),
        format!("{UUID1} 0000:3b:00.0 0"),
    );
    let none = "null null null";
    assert_eq!(
        rows,
        [
            // Before any context: two devices on a three-GPU node, no answer.
            format!("cuInit {none} main"),
            // The device each asks about.
            format!("cuDeviceGetUuid_v2 {gpu0} main"),
            format!("cuDeviceGetUuid {gpu1} main"),
            format!("cuDevicePrimaryCtxRetain {gpu0} main"),
            format!("cuDevicePrimaryCtxRetain {gpu1} main"),
            // Thread 1 sets device 0's context, pushes device 1's over it, pops it.
            format!("cuCtxSetCurrent {gpu0} thread"),
            format!("cuMemAlloc_v2 {gpu0} thread"),
            format!("cuLaunchKernel {gpu0} thread"),
            format!("cuCtxPushCurrent_v2 {gpu1} thread"),
            format!("cuLaunchKernel {gpu1} thread"),
            format!("cuCtxPopCurrent_v2 {gpu0} thread"),
            format!("cuLaunchKernel {gpu0} thread"),
            // Thread 2 has device 1's.
            format!("cuCtxSetCurrent {gpu1} thread"),
            format!("cuMemAlloc_v2 {gpu1} thread"),
            format!("cuLaunchKernel {gpu1} thread"),
            // The main thread creates a context on device 0 (current at once), destroys it.
            format!("cuCtxCreate_v4 {gpu0} main"),
            format!("cuLaunchKernel {gpu0} main"),
            format!("cuCtxDestroy_v2 {none} main"),
            format!("cuLaunchKernel {none} main"),
        ]
    );
}

/// One process on a one-GPU node: every row carries the GPU, so the Parquet sink counts the
/// GPU's columns, like `host` and `boot_id`, instead of looking each row up in a dictionary, and
/// writes their chunks itself (`sinks/src/parquet/constant_chunk.rs`). DuckDB, which no one
/// here wrote, reads every row's values back, and the chunks' row counts, dictionary encoding
/// and statistics from the files' metadata.
#[test]
fn rows_on_one_gpu_are_written_as_counted_chunks_that_duckdb_reads() {
    let _shared = support::shared();
    let fixtures = Fixtures::build();
    let data = data_dir();
    let gpus = fake_gpu_dir("NVIDIA H200", &[(0, "0000:19:00.0", UUID0)]);
    let config = format!(
        "{}\n[enrich]\nnvidia_proc_dir = \"{}\"\n",
        fixtures.cuda_config(data.path(), r#"["default"]"#),
        gpus.path().display()
    );
    let agent = Agent::start(&config, &[]);
    let (_, stdout) = fixtures.run_workload(&["threads", "2", "20000"], &[]);
    assert_eq!(stdout.trim(), "workload: threads calls=80000");
    let stopped = agent.stop();
    assert!(stopped.status.success(), "{}", stopped.log);
    assert_eq!(stopped.assert_nothing_lost("cuda", "cuda"), 80_000);
    let files = format!("{}/cuda/**/*.parquet", data.path().display());
    let values = duckdb(&format!(
        "select count(*), count(distinct gpu_uuid), min(gpu_uuid), count(pci_bus_id), \
         min(pci_bus_id), count(distinct host), count(distinct boot_id), \
         count(*) filter (where function in ('cuMemAlloc_v2', 'cuMemFree_v2')) \
         from read_parquet('{files}')"
    ));
    assert_eq!(
        values,
        [[
            "80000",
            "1",
            UUID0,
            "80000",
            "0000:19:00.0",
            "1",
            "1",
            "80000"
        ]]
    );
    // Per column, over every row group: rows, the dictionary in every chunk, and min/max
    // statistics equal to the one value where the column keeps them (`host`, `boot_id`).
    let chunks = duckdb(&format!(
        "with m as (select * from parquet_metadata('{files}')), \
         v as (select min(host) as host, min(boot_id) as boot_id from read_parquet('{files}')) \
         select path_in_schema, sum(num_values), \
         bool_and(encodings like '%RLE_DICTIONARY%'), \
         bool_and(coalesce(stats_min_value = case path_in_schema when 'host' then v.host \
           when 'boot_id' then v.boot_id end, false)), \
         bool_and(coalesce(stats_max_value = stats_min_value, false)), \
         bool_and(stats_min_value is null) \
         from m, v where path_in_schema in ('host', 'boot_id', 'gpu_uuid', 'pci_bus_id') \
         group by 1 order by 1"
    ));
    assert_eq!(
        chunks,
        [
            ["boot_id", "80000", "True", "True", "True", "False"],
            ["gpu_uuid", "80000", "True", "False", "False", "True"],
            ["host", "80000", "True", "True", "True", "False"],
            ["pci_bus_id", "80000", "True", "False", "False", "True"],
        ]
    );
}
