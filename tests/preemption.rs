//! The BPF programs under preemption: uprobe, fentry and faultable-tracepoint programs run with
//! migration disabled but can be preempted, so whatever two tasks on one CPU can both reach
//! mid-program (per-CPU scratch, a non-atomic counter) mixes their calls or loses counts.
//!
//! Two kinds of test. The stress runs the real agent against many more traced threads than
//! CPUs, each passing arguments made of its own tid and round number, and checks every row and
//! the accounting identities exactly. Whether a program is actually preempted depends on the
//! kernel's preemption model (a `preempt=none` kernel never preempts one), so the stress alone
//! cannot prove the race is closed everywhere; the static test checks the compiled programs for
//! the two shapes of the defect: per-CPU maps other than the counters, and 64-bit
//! read-add-write sequences on map memory.

use std::collections::{BTreeMap, BTreeSet};
use std::mem::MaybeUninit;

use crate::support;
use crate::support::agent::{data_dir, Agent};
use crate::support::lake::read_table;
use crate::support::Fixtures;

use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, UInt32Type, UInt64Type};
use arrow_array::{Array, Int32Array, RecordBatch, StringArray, UInt32Array, UInt64Array};
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{MapType, OpenObject};

/// Traced threads: 32 per CPU of the 2-CPU CI machine.
const THREADS: u64 = 64;
/// Rounds of three calls per thread and agent run.
const ROUNDS: u64 = 3_000;
/// Agent runs per mode.
const REPEATS: usize = 2;
const FUNCTIONS: &str = r#"["cuMemAlloc_v2", "cuMemFree_v2", "cuLaunchKernel"]"#;

/// Entry-only records were built in a per-CPU scratch buffer: a preempted program could submit
/// another thread's call.
#[test]
fn entry_only_rows_under_preemption_carry_their_own_threads_arguments() {
    let _alone = support::exclusive();
    let extra = format!("entry_only = {FUNCTIONS}\n");
    for round in 0..REPEATS {
        stress(&extra, round);
    }
}

/// With one in-flight slot, all but one thread's calls are kept in the hash table, whose
/// entries were built in the same per-CPU scratch buffer.
#[test]
fn hash_path_rows_under_preemption_carry_their_own_threads_arguments() {
    let _alone = support::exclusive();
    for round in 0..REPEATS {
        stress("inflight_slots = 1\n", round);
    }
}

/// One agent run: `THREADS` threads make `ROUNDS` rounds each; every row is checked against its
/// tid and round, and the counters against the calls made.
fn stress(extra: &str, round: usize) {
    let fixtures = Fixtures::build();
    let data = data_dir();
    let config = fixtures.cuda_config(data.path(), FUNCTIONS).replace(
        "drain_interval_ms = 20\n",
        &format!("drain_interval_ms = 20\n{extra}"),
    );
    let agent = Agent::start(&config, &[]);
    let started = std::time::Instant::now();
    let (pid, stdout) =
        fixtures.run_workload(&["tidargs", &THREADS.to_string(), &ROUNDS.to_string()], &[]);
    let calls = THREADS * ROUNDS * 3;
    assert_eq!(stdout.trim(), format!("workload: tidargs calls={calls}"));
    let ran = started.elapsed();
    let stopped = agent.stop();
    let drained = started.elapsed();
    let ring = stopped.ring("cuda");
    let count = |name: &str| {
        ring[name]
            .as_u64()
            .unwrap_or_else(|| panic!("{name} in {}", stopped.outcome))
    };
    let (emitted, received, lost) = (count("emitted"), count("received"), count("lost_in_kernel"));
    eprintln!(
        "round {round} ({}): calls {calls}, lost_in_kernel {lost}, workload {ran:?}, stopped {drained:?}",
        extra.trim()
    );
    // Every call made is counted once: submitted to the ring or lost in it.
    assert_eq!(emitted, calls, "{}", stopped.outcome);
    assert_eq!(received + lost, emitted, "{}", stopped.outcome);
    for zero in [
        "pending_in_ring",
        "decode_errors",
        "unmatched_returns",
        "inflight_full",
    ] {
        assert_eq!(count(zero), 0, "{zero}: {}", stopped.outcome);
    }
    let sink = stopped.sink("cuda");
    assert_eq!(sink["received"], received, "{}", stopped.outcome);
    assert_eq!(sink["delivered"], received, "{}", stopped.outcome);

    let batches = read_table(data.path(), "cuda");
    // (tid, function) -> rounds seen: each at most once, so that with the counts above every
    // call is its own row.
    let mut seen = BTreeMap::<(i32, String), BTreeSet<u64>>::new();
    let mut rows = 0u64;
    for batch in &batches {
        let columns = Columns::of(batch);
        for i in 0..batch.num_rows() {
            assert_eq!(columns.pid.value(i), pid as i32);
            let tid = columns.tid.value(i);
            let function = columns.function.value(i);
            let tag_round = columns.round_of(i, tid, function);
            assert!(tag_round < ROUNDS, "round {tag_round} out of range");
            let fresh = seen
                .entry((tid, function.to_string()))
                .or_default()
                .insert(tag_round);
            assert!(fresh, "round {tag_round} of tid {tid} twice");
            rows += 1;
        }
    }
    assert_eq!(rows, received);
    eprintln!("rows checked at {:?}", started.elapsed());
}

/// The `cuda` columns the check reads, downcast once per batch.
struct Columns<'a> {
    pid: &'a Int32Array,
    tid: &'a Int32Array,
    function: &'a StringArray,
    bytes: &'a UInt64Array,
    device_ptr: &'a UInt64Array,
    stream: &'a UInt64Array,
    /// grid x, y, z, block x, y, z, shared memory bytes.
    launch: [&'a UInt32Array; 7],
}

impl<'a> Columns<'a> {
    fn of(batch: &'a RecordBatch) -> Columns<'a> {
        let column = |name: &str| {
            batch
                .column_by_name(name)
                .unwrap_or_else(|| panic!("no column {name}"))
        };
        let u64s = |name: &str| column(name).as_primitive::<UInt64Type>();
        let u32s = |name: &str| column(name).as_primitive::<UInt32Type>();
        Columns {
            pid: column("pid").as_primitive::<Int32Type>(),
            tid: column("tid").as_primitive::<Int32Type>(),
            function: column("function").as_string::<i32>(),
            bytes: u64s("bytes"),
            device_ptr: u64s("device_ptr"),
            stream: u64s("stream"),
            launch: [
                "grid_x",
                "grid_y",
                "grid_z",
                "block_x",
                "block_y",
                "block_z",
                "shared_mem_bytes",
            ]
            .map(u32s),
        }
    }

    /// The round row `i`'s arguments carry, after checking they all carry its own tid.
    fn round_of(&self, i: usize, tid: i32, function: &str) -> u64 {
        let tid = tid as u64;
        let tag = |values: &UInt64Array, what: &str| {
            assert!(!values.is_null(i), "{what} missing in a {function} row");
            let value = values.value(i);
            assert_eq!(
                value >> 32,
                tid,
                "{what} of another thread in a {function} row"
            );
            value & 0xffff_ffff
        };
        match function {
            "cuMemAlloc_v2" => tag(self.bytes, "bytes"),
            "cuMemFree_v2" => tag(self.device_ptr, "device_ptr"),
            "cuLaunchKernel" => {
                let round = tag(self.stream, "stream");
                let expected = [tid as u32, round as u32, 1, 1, 1, tid as u32, round as u32];
                let launch = self
                    .launch
                    .map(|values| (!values.is_null(i)).then(|| values.value(i)));
                assert_eq!(
                    launch,
                    expected.map(Some),
                    "launch of another call, tid {tid}"
                );
                round
            }
            other => panic!("unexpected function {other}"),
        }
    }
}

/// The consumer and the async runtime's threads (the sinks) run at nice -20, so that traced
/// threads keeping every CPU busy cannot starve them; the main thread, which starts a traced
/// command, keeps the default, and so does the command.
#[test]
fn consumer_and_sink_threads_run_raised_and_a_traced_command_does_not() {
    let _shared = support::shared();
    let fixtures = Fixtures::build();
    let data = data_dir();
    let gate = tempfile::tempdir().expect("tempdir");
    let go = gate.path().join("go");
    let script = format!(
        "echo \"command nice: $(nice)\"; while [ ! -e {} ]; do sleep 0.05; done",
        go.display()
    );
    let agent = Agent::start(
        &fixtures.cuda_config(data.path(), FUNCTIONS),
        &["--", "sh", "-c", &script],
    );
    let own = nice_of(std::path::Path::new("/proc/thread-self"));
    let mut by_name = BTreeMap::<String, Vec<i32>>::new();
    let tasks = std::path::PathBuf::from(format!("/proc/{}/task", agent.pid()));
    let main = nice_of(&tasks.join(agent.pid().to_string()));
    for task in std::fs::read_dir(&tasks).expect("agent threads") {
        let task = task.expect("thread entry").path();
        let name = std::fs::read_to_string(task.join("comm")).expect("comm");
        by_name
            .entry(name.trim().to_string())
            .or_default()
            .push(nice_of(&task));
    }
    std::fs::write(&go, b"").expect("opening the gate");
    let stopped = agent.wait();
    assert!(stopped.status.success(), "{}", stopped.log);
    assert_eq!(by_name["gpuship-consume"], vec![-20], "{by_name:?}");
    let runtime = &by_name["gpuship-rt"];
    assert!(
        !runtime.is_empty() && runtime.iter().all(|&nice| nice == -20),
        "{by_name:?}"
    );
    assert_eq!(main, own, "main thread: {by_name:?}");
    assert!(
        stopped.log.contains(&format!("command nice: {own}")),
        "{}",
        stopped.log
    );
    assert!(
        stopped
            .log
            .contains("consumer and sink threads run at a raised priority"),
        "{}",
        stopped.log
    );
}

/// The nice value of the thread whose /proc folder is `task` (field 19 of its stat).
fn nice_of(task: &std::path::Path) -> i32 {
    let stat = std::fs::read_to_string(task.join("stat")).expect("stat");
    let (_, fields) = stat.rsplit_once(')').expect("stat has a comm");
    fields
        .split_whitespace()
        .nth(16)
        .and_then(|nice| nice.parse().ok())
        .unwrap_or_else(|| panic!("no nice value in {stat}"))
}

/// The shapes of the defect, in the compiled programs: a per-CPU map that is not a counter
/// array (scratch shared by the tasks of one CPU), or a 64-bit load, add and store back to the
/// same map address (an increment that a preemption between load and store undoes).
#[test]
fn programs_keep_no_per_cpu_scratch_and_count_atomically() {
    let mut problems = Vec::new();
    let mut storage = MaybeUninit::uninit();
    let cuda = gpuship::bpf::cuda::CudaSkelBuilder::default()
        .open(&mut storage)
        .expect("opening the CUDA object");
    problems.extend(shared_state_problems("cuda", cuda.open_object()));
    let mut storage = MaybeUninit::uninit();
    let driver = gpuship::bpf::driver::DriverSkelBuilder::default()
        .open(&mut storage)
        .expect("opening the driver object");
    problems.extend(shared_state_problems("driver", driver.open_object()));
    let mut storage = MaybeUninit::uninit();
    let xid = gpuship::bpf::xid::XidSkelBuilder::default()
        .open(&mut storage)
        .expect("opening the XID object");
    problems.extend(shared_state_problems("xid", xid.open_object()));
    assert!(problems.is_empty(), "{problems:#?}");
}

fn shared_state_problems(object: &str, open: &OpenObject) -> Vec<String> {
    let mut problems = Vec::new();
    for map in open.maps() {
        let name = map.name().to_string_lossy().into_owned();
        let per_cpu = matches!(
            map.map_type(),
            MapType::PercpuArray | MapType::PercpuHash | MapType::LruPercpuHash
        );
        // Counters only: `*_stats` slots, or a ring's claimed-slot count (`*_head`).
        if per_cpu && !name.ends_with("_stats") && !name.ends_with("_head") {
            problems.push(format!(
                "{object}: per-CPU map {name} is not a counter array"
            ));
        }
    }
    for prog in open.progs() {
        let name = prog.name().to_string_lossy().into_owned();
        let insns: Vec<Insn> = prog
            .insns()
            .iter()
            .map(|i| Insn {
                code: i.code,
                dst: i.dst_reg(),
                src: i.src_reg(),
                off: i.off,
            })
            .collect();
        for at in non_atomic_increments(&insns) {
            problems.push(format!(
                "{object}: {name}: non-atomic increment at instruction {at}"
            ));
        }
    }
    problems
}

/// The fields of a BPF instruction the check reads.
#[derive(Clone, Copy)]
struct Insn {
    code: u8,
    dst: u8,
    src: u8,
    off: i16,
}

const CLASS_LDX: u8 = 0x01;
const CLASS_STX: u8 = 0x03;
const CLASS_ALU64: u8 = 0x07;
const SIZE_DW: u8 = 0x18;
const MODE_MEM: u8 = 0x60;
const OP_ADD: u8 = 0x00;
const FRAME_POINTER: u8 = 10;

/// Indexes of 64-bit loads from non-stack memory whose register is added to and stored back
/// to the same address within a few instructions.
fn non_atomic_increments(insns: &[Insn]) -> Vec<usize> {
    let load = CLASS_LDX | SIZE_DW | MODE_MEM;
    let store = CLASS_STX | SIZE_DW | MODE_MEM;
    let mut found = Vec::new();
    for (at, first) in insns.iter().enumerate() {
        if first.code != load || first.src == FRAME_POINTER {
            continue;
        }
        let (value, base) = (first.dst, first.src);
        let mut added = false;
        for next in insns.iter().skip(at + 1).take(8) {
            if next.code & 0x07 == CLASS_ALU64 && next.code & 0xf0 == OP_ADD && next.dst == value {
                added = true;
            } else if next.code == store
                && next.dst == base
                && next.src == value
                && next.off == first.off
            {
                if added {
                    found.push(at);
                }
                break;
            }
        }
    }
    found
}

#[test]
fn the_increment_check_tells_an_atomic_add_from_a_plain_one() {
    let insn = |code: u8, dst: u8, src: u8| Insn {
        code,
        dst,
        src,
        off: 0,
    };
    // r1 = *(u64 *)(r0 + 0); r1 += 1; *(u64 *)(r0 + 0) = r1
    let plain = [
        insn(CLASS_LDX | SIZE_DW | MODE_MEM, 1, 0),
        insn(CLASS_ALU64 | OP_ADD, 1, 0),
        insn(CLASS_STX | SIZE_DW | MODE_MEM, 0, 1),
    ];
    assert_eq!(non_atomic_increments(&plain), vec![0]);
    // r1 = 1; lock *(u64 *)(r0 + 0) += r1
    let atomic = [
        insn(CLASS_ALU64 | 0xb0, 1, 0),
        insn(CLASS_STX | SIZE_DW | 0xc0, 0, 1),
    ];
    assert!(non_atomic_increments(&atomic).is_empty());
    // The same on the stack (r10) is private to the program.
    let stack = [
        insn(CLASS_LDX | SIZE_DW | MODE_MEM, 1, FRAME_POINTER),
        insn(CLASS_ALU64 | OP_ADD, 1, 0),
        insn(CLASS_STX | SIZE_DW | MODE_MEM, FRAME_POINTER, 1),
    ];
    assert!(non_atomic_increments(&stack).is_empty());
}
