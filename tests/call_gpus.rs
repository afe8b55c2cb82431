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
