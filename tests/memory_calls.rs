//! The allocation families beyond cuMemAlloc, on real eBPF with the stand-in library: pitched,
//! stream-ordered pool, pinned host and virtual-memory (cuMemCreate / cuMemMap) calls are in
//! the default probes, each a row with its size, the pointer or handle it made or used, and
//! its stream.

use crate::support;
use crate::support::agent::{data_dir, Agent};
use crate::support::lake::duckdb;
use crate::support::Fixtures;

/// The stand-in's n-th allocation of a process (fake_control.c: base + n x 1 MiB).
fn fake_pointer(n: u64) -> String {
    (0x7f00_0000_0000u64 + n * 0x10_0000).to_string()
}

#[test]
fn pool_pinned_and_virtual_memory_calls_are_rows_with_their_sizes_and_handles() {
    let _shared = support::shared();
    let fixtures = Fixtures::build();
    let data = data_dir();
    let agent = Agent::start(&fixtures.cuda_config(data.path(), r#"["default"]"#), &[]);
    let (pid, stdout) = fixtures.run_workload(&["memory"], &[]);
    assert!(stdout.contains("calls=14"), "{stdout}");
    let stopped = agent.stop();
    assert!(stopped.status.success(), "{}", stopped.log);
    assert_eq!(stopped.assert_nothing_lost("cuda", "cuda"), 14);
    let rows: Vec<String> = duckdb(&format!(
        "select function, result_name, coalesce(cast(bytes as varchar), 'null'), \
         coalesce(cast(device_ptr as varchar), 'null'), coalesce(cast(stream as varchar), 'null') \
         from read_parquet('{}/cuda/**/*.parquet', hive_partitioning = true) \
         where pid = {pid} order by time_ns",
        data.path().display()
    ))
    .into_iter()
    .map(|row| row.join(" "))
    .collect();
    let (pitched, pooled, host1, host2, range, handle) = (
        fake_pointer(0),
        fake_pointer(1),
        fake_pointer(2),
        fake_pointer(3),
        fake_pointer(4),
        fake_pointer(5),
    );
    let ok = "CUDA_SUCCESS";
    assert_eq!(
        rows,
        [
            format!("cuMemAllocPitch_v2 {ok} null {pitched} null"),
            format!("cuMemAllocFromPoolAsync {ok} 8192 {pooled} 20480"),
            format!("cuMemPoolTrimTo {ok} 4096 null null"),
            format!("cuMemHostAlloc {ok} 65536 {host1} null"),
            format!("cuMemAllocHost_v2 {ok} 131072 {host2} null"),
            format!("cuMemFreeHost {ok} null {host1} null"),
            format!("cuMemFreeHost {ok} null {host2} null"),
            format!("cuMemAddressReserve {ok} 2147483648 {range} null"),
            format!("cuMemCreate {ok} 2097152 {handle} null"),
            format!("cuMemMap {ok} 2097152 {range} null"),
            format!("cuMemSetAccess {ok} 2097152 {range} null"),
            format!("cuMemUnmap {ok} 2097152 {range} null"),
            format!("cuMemRelease {ok} null {handle} null"),
            format!("cuMemAddressFree {ok} 2147483648 {range} null"),
        ]
    );
}
