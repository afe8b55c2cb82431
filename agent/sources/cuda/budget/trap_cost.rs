//! The node's cost of one probed call, measured by the agent on itself: a function of its own
//! (`gpuship_trap_site`, which starts like a driver function, with `push rbp`) is called many
//! times without and with the `trap_calibration` program attached to it (a pid-filtered
//! uprobe_multi link on the agent's own executable), and the difference per call is the
//! trap plus what a hot entry does in maps. The budget multiplies it by each process's traps
//! per second.
//!
//! A training loop does tens of microseconds of its own work between two launches, which
//! evicts the trap's kernel path from the caches and branch predictors, and the trap evicts
//! the loop's: each trap then costs the process several times what it costs a loop that does
//! nothing but call (on an H200 host, 0.8 µs back to back against about 3.3 µs per launch in a
//! PyTorch MLP). So every call of the measurement is preceded by a sweep over a buffer larger
//! than the core's L2 cache (the same sweep in both runs), and the difference counts the trap
//! as it costs a process whose caches are busy. x86-64 only, like the BPF programs' headers (`bpf/include/x86_64`).

use std::hint::black_box;
use std::time::{Duration, Instant};

use anyhow::Context;
use libbpf_rs::UprobeMultiOpts;

use crate::bpf::cuda::CudaSkel;

/// What a trap costs a training process against what it costs the measurement: on an H200
/// host the measurement gives 0.8 µs, while the launches of a PyTorch MLP loop (25,000 a
/// second) cost it 3.3 µs each with only the kernel's own trace event on them (9.5% of its
/// step time fully probed on an H100, docs/performance.md). The process's own work between two
/// traps, and the kernel's work in them, each evict the other's caches and branch history.
pub const IN_PROCESS_FACTOR: f64 = 4.0;

/// Timed calls per site, alternating between the probed and the plain one.
const CALLS: usize = 1_000;
/// Bytes swept before each call (one load per 64-byte line): more than a core's L2.
const SWEEP_BYTES: usize = 4 << 20;

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
    ".globl gpuship_plain_site",
    ".type gpuship_plain_site, @function",
    "gpuship_plain_site:",
    "push rbp",
    "mov rbp, rsp",
    "lea rax, [rdi + 1]",
    "pop rbp",
    "ret",
    ".size gpuship_plain_site, . - gpuship_plain_site",
);

unsafe extern "C" {
    fn gpuship_trap_site(x: u64) -> u64;
    fn gpuship_plain_site(x: u64) -> u64;
}

/// Calls the probed site, or its unprobed twin.
fn call_site(x: u64, probed: bool) -> u64 {
    // SAFETY: the functions above read one register and return; they touch no memory but
    // their own stack slot.
    unsafe {
        if probed {
            gpuship_trap_site(x)
        } else {
            gpuship_plain_site(x)
        }
    }
}

/// One call of a site after a sweep of an eighth of `sweep` (so the call finds cold caches),
/// timed alone: a preemption lands in the short timed span only rarely.
fn timed_call(sweep: &mut [u8], round: usize, probed: bool) -> Duration {
    // A different eighth of the buffer each call, written so it stays dirty.
    let part = sweep.len() / 8;
    let from = (round % 8) * part;
    for line in sweep[from..from + part].iter_mut().step_by(64) {
        *line = line.wrapping_add(1);
    }
    let started = Instant::now();
    black_box(call_site(black_box(round as u64), probed));
    started.elapsed()
}

/// The median probed call less the median plain call, in nanoseconds. The calls alternate,
/// so a change of the machine's speed meanwhile hits both sides alike, and each is timed
/// alone, so the busy CPUs of a node (the training processes the budget is for) preempt
/// few of them: medians of whole blocks of calls measured several times the trap there.
fn median_difference(sweep: &mut [u8]) -> f64 {
    let mut plain = Vec::with_capacity(CALLS);
    let mut probed = Vec::with_capacity(CALLS);
    for round in 0..CALLS {
        plain.push(timed_call(sweep, round, false));
        probed.push(timed_call(sweep, round, true));
    }
    let median = |times: &mut Vec<Duration>| {
        times.sort_unstable();
        times[times.len() / 2].as_nanos() as f64
    };
    median(&mut probed) - median(&mut plain)
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
    let mut sweep = vec![0u8; SWEEP_BYTES];
    // The buffer once, so the first calls pay no page faults.
    for round in 0..8 {
        timed_call(&mut sweep, round, false);
    }
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
    let per_call = median_difference(&mut sweep);
    // Detaching waits for a grace period; nothing needs to wait for it.
    std::thread::spawn(move || drop(link));
    anyhow::ensure!(
        per_call > 0.0,
        "a probed call measured no slower than a plain one ({per_call:.0} ns apart)"
    );
    let _ = libbpf_rs::MapCore::delete(&skel.maps.process_traps, &(pid as u32).to_ne_bytes());
    Ok(per_call)
}

/// The trap cost assumed when it cannot be measured (a VM's uprobe trap with a small program).
const FALLBACK_TRAP_NS: f64 = 2_000.0;

/// The cost the budget counts per trap: the measured one times what a busy process pays more
/// ([`IN_PROCESS_FACTOR`]).
pub fn measure_trap_cost(skel: &CudaSkel<'_>) -> f64 {
    match measure(skel) {
        Ok(ns) => {
            let counted = ns * IN_PROCESS_FACTOR;
            tracing::info!(measured_ns = ns, counted_ns = counted, "trap cost measured");
            counted
        }
        Err(err) => {
            tracing::warn!(
                error = format!("{err:#}"),
                assumed_ns = FALLBACK_TRAP_NS * IN_PROCESS_FACTOR,
                "cannot measure the trap cost; assuming a typical one"
            );
            FALLBACK_TRAP_NS * IN_PROCESS_FACTOR
        }
    }
}
