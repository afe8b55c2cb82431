//! The defaults of `[sources.cuda]` (serde's `default = "..."` functions).

pub fn cuda_stats_interval_secs() -> u64 {
    10
}
pub fn drain_interval_ms() -> u64 {
    100
}
pub fn exclude_functions() -> Vec<String> {
    [
        "cuGetProcAddress*",
        "cuCtxGetCurrent",
        "cuCtxGetDevice*",
        "cuDevicePrimaryCtxGetState",
        "cuDeviceGetAttribute",
        "cuGetErrorName",
        "cuGetErrorString",
        "cuGetExportTable",
        "cuOccupancy*",
    ]
    .map(String::from)
    .to_vec()
}
pub fn flight_recorder_secs() -> u64 {
    10
}
pub fn flight_recorder_slots_per_cpu() -> u32 {
    4_096
}
pub fn functions() -> Vec<String> {
    vec!["default".into()]
}
/// Launches, async copies and the kernel lookups the CUDA 13 runtime makes on every step:
/// thousands per second in a training loop, each a trap.
pub fn hot_functions() -> Vec<String> {
    [
        "cuLaunchKernel*",
        "cuGraphLaunch*",
        "cuMemcpy*Async*",
        "cuKernelGetFunction",
    ]
    .map(String::from)
    .to_vec()
}
pub fn incident_full_probing_secs() -> u64 {
    300
}
pub fn inflight_slots() -> u32 {
    16_384
}
pub fn libraries() -> Vec<String> {
    vec!["auto".into()]
}
pub fn library_rescan_secs() -> u64 {
    30
}
pub fn min_observed_fraction() -> f64 {
    0.01
}
/// 0.5%: half the 1% slowdown a launch-bound training loop may see, the other half for
/// the cost model's error (docs/performance.md, "The overhead budget").
pub fn overhead_budget() -> String {
    "0.5%".to_string()
}
pub fn ring_size_mib() -> u32 {
    8
}
pub fn sampling_window_ms() -> u64 {
    500
}
pub fn slow_call_ns() -> u64 {
    10_000_000
}
/// The stats-mode functions probed without their return: launches (docs/performance.md).
pub fn stats_entry_only() -> Vec<String> {
    vec!["cuLaunchKernel*".to_string()]
}
/// The hot calls of a training or inference loop: thousands per second per process,
/// low value one by one (their failures and slow ones are still rows).
pub fn stats_functions() -> Vec<String> {
    [
        "cuLaunchKernel*",
        "cuMemcpy*Async*",
        "cuGraphLaunch*",
        "cuKernelGetFunction",
    ]
    .map(String::from)
    .to_vec()
}
pub fn stats_max_entries() -> u32 {
    8_192
}
pub fn yes() -> bool {
    true
}
