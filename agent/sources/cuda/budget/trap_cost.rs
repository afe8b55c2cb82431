//! The node's cost of one probed call, measured by the agent on itself: a function of its own
//! (`gpuship_trap_site`, which starts like a driver function, with `push rbp`) is called many
//! times without and with the `trap_calibration` program attached to it (a pid-filtered
//! uprobe_multi link on the agent's own executable), and the difference per call is the
//! trap plus what a hot entry does in maps. The budget multiplies it by each process's traps
//! per second. x86-64 only, like the BPF programs' headers (`bpf/include/x86_64`).

use std::hint::black_box;
use std::time::{Duration, Instant};

use anyhow::Context;
use libbpf_rs::UprobeMultiOpts;

use crate::bpf::cuda::CudaSkel;

/// Calls per timed run.
const CALLS: u32 = 10_000;
/// Timed runs per side; the fastest counts (the least disturbed).
const RUNS: usize = 3;

std::arch::global_asm!(
    ".globl gpuship_trap_site",
    ".type gpuship_trap_site, @function",
    "gpuship_trap_site:",
    "push rbp",
    "mov rbp, rsp",
    "lea rax, [rdi + 1]",
    "pop rbp",
    "ret",
    ".size gpuship_trap_site, . - gpuship_trap_site",
);

unsafe extern "C" {
    fn gpuship_trap_site(x: u64) -> u64;
}

fn call_site(x: u64) -> u64 {
    // SAFETY: the function above reads one register and returns; it touches no memory but its
    // own stack slot.
    unsafe { gpuship_trap_site(x) }
}

fn fastest_run() -> Duration {
    (0..RUNS)
        .map(|_| {
            let started = Instant::now();
            let mut x = 0u64;
            for _ in 0..CALLS {
                x = call_site(black_box(x));
            }
            black_box(x);
            started.elapsed()
        })
        .min()
        .unwrap_or_default()
}

/// The file offset of `gpuship_trap_site` in the agent's executable, from its own maps.
fn site_offset() -> anyhow::Result<u64> {
    let address = gpuship_trap_site as *const () as u64;
    let maps = std::fs::read_to_string("/proc/self/maps").context("reading /proc/self/maps")?;
    maps.lines()
        .find_map(|line| {
            let mut fields = line.split_whitespace();
            let (start, end) = fields.next()?.split_once('-')?;
            let start = u64::from_str_radix(start, 16).ok()?;
            let end = u64::from_str_radix(end, 16).ok()?;
            let _perms = fields.next()?;
            let offset = u64::from_str_radix(fields.next()?, 16).ok()?;
            (start..end)
                .contains(&address)
                .then(|| address - start + offset)
        })
        .context("the calibration function is in none of the agent's mappings")
}

/// Measures the cost of one probed call, in nanoseconds.
pub fn measure(skel: &CudaSkel<'_>) -> anyhow::Result<f64> {
    let offset = site_offset()?;
    let pid = std::process::id() as i32;
    let plain = fastest_run();
    let opts = UprobeMultiOpts {
        offsets: vec![offset as usize],
        cookies: vec![0],
        ..Default::default()
    };
    let link = skel
        .progs
        .trap_calibration
        .attach_uprobe_multi_with_opts(pid, "/proc/self/exe", "", opts)
        .context("attaching the calibration probe to the agent itself")?;
    let probed = fastest_run();
    // Detaching waits for a grace period; nothing needs to wait for it.
    std::thread::spawn(move || drop(link));
    let per_call = probed.saturating_sub(plain).as_nanos() as f64 / f64::from(CALLS);
    anyhow::ensure!(
        per_call > 0.0,
        "a probed call measured no slower than a plain one ({probed:?} and {plain:?} for {CALLS} calls)"
    );
    let _ = libbpf_rs::MapCore::delete(&skel.maps.process_traps, &(pid as u32).to_ne_bytes());
    Ok(per_call)
}
