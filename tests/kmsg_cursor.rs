//! A damaged kernel-log cursor can neither silence XIDs nor hang the agent: a cursor ahead of
//! the kernel log, unreadable, too large or not a regular file is set aside (renamed
//! `kmsg-cursor.json.bad-<ms>`), counted (`state_files_set_aside`, on `/metrics` too) and
//! logged once, and the agent reads the boot's log from its first record, so the XID logged
//! while it was down and one logged after it started each reach the lake exactly once. A FIFO
//! at the cursor's name does not block start-up; a cursor others can read is made 0600.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::support;
use crate::support::agent::{data_dir, Agent, Stopped};
use crate::support::kmsg;
use crate::support::lake::read_table;
use arrow_array::cast::AsArray;
use arrow_array::types::UInt32Type;

const CURSOR: &str = "kmsg-cursor.json";

/// Kernel-log XIDs only, Parquet into `lake`, state in `state`.
fn config(lake: &Path, state: &Path) -> String {
    format!(
        "[agent]\nstate_dir = \"{}\"\n\n[sources.xid]\ntracepoint = false\nkmsg = true\n\n\
         [sources.cuda]\nenabled = false\n\n[sources.driver]\nioctl = false\n\n\
         [[sinks]]\ntype = \"parquet\"\npath = \"{}\"\n",
        state.display(),
        lake.display()
    )
}

/// A bus id no other test, and no earlier run of this one in this boot, used: an agent that
/// reads the whole kernel log sees every XID logged since boot.
fn unique_bus() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!(
        "{:04x}:{:02x}:{:02x}.0",
        (nanos / 1000) % 0xffff,
        0xe0 + (nanos % 16) as u8,
        std::process::id() % 256
    )
}

fn xid_line(bus: &str, code: u32) -> String {
    let short = bus.trim_end_matches(".0");
    format!("<3>NVRM: Xid (PCI:{short}): {code}, pid=4242, name=trainer, cursor test.")
}

/// The codes of the XID rows in the lake on bus `bus`, sorted.
fn codes(lake: &Path, bus: &str) -> Vec<u32> {
    let mut codes = Vec::new();
    if !lake.join("xid").exists() {
        return codes;
    }
    for batch in read_table(lake, "xid") {
        let buses = batch["pci_bus_id"].as_string::<i32>();
        let values = batch["code"].as_primitive::<UInt32Type>();
        for i in 0..batch.num_rows() {
            if buses.value(i) == bus {
                codes.push(values.value(i));
            }
        }
    }
    codes.sort_unstable();
    codes
}

/// This boot's id, as the agent keys its cursor.
fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .unwrap()
        .trim()
        .to_string()
}

/// The sequence number of the last record the kernel log holds now.
fn last_seq() -> u64 {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let mut log = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open("/dev/kmsg")
        .unwrap();
    let mut buf = vec![0; 8192];
    let mut last = 0;
    loop {
        match log.read(&mut buf) {
            Ok(n) => {
                let record = String::from_utf8_lossy(&buf[..n]);
                last = record.split(',').nth(1).unwrap().parse().unwrap();
            }
            Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => return last,
            // A record overwritten before it was read.
            Err(err) if err.raw_os_error() == Some(libc::EPIPE) => {}
            Err(err) => panic!("reading /dev/kmsg: {err}"),
        }
    }
}

/// A state directory (0700) with `plant` done to its cursor's name.
fn state_with(base: &Path, plant: impl FnOnce(&Path)) -> PathBuf {
    let state = base.join("state");
    std::fs::create_dir(&state).unwrap();
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o700)).unwrap();
    plant(&state.join(CURSOR));
    state
}

/// How long an agent that reads the whole kernel log may take to reach the end: every XID the
/// suite logged since boot is read again and handed to the sinks (each fsynced in the XID
/// journal), about 50 a second on the CI VM.
const CATCH_UP: Duration = Duration::from_secs(120);

/// Logs an XID 48 while no agent runs, starts one on `state`, logs an XID 79 once it runs,
/// and stops it when both are in the lake (or after [`CATCH_UP`]).
fn xid_while_down_and_after(lake: &Path, state: &Path, bus: &str) -> Stopped {
    kmsg(&xid_line(bus, 48));
    let agent = Agent::start(&config(lake, state), &[]);
    kmsg(&xid_line(bus, 79));
    let deadline = Instant::now() + CATCH_UP;
    while codes(lake, bus).len() < 2 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let stopped = agent.stop();
    assert!(stopped.status.success(), "{}", stopped.log);
    stopped
}

/// Counts of `state_files_set_aside` for the cursor, by reason, as the summary has them.
fn set_aside_counts(stopped: &Stopped) -> serde_json::Value {
    stopped.outcome["accounting"]["state_files_set_aside"]["kmsg_cursor"].clone()
}

/// What the state directory holds besides the spool and the lock, sorted; the set-aside
/// names with their time cut off.
fn state_names(state: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(state)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n != "spool" && n != "lock")
        .map(|n| match n.find(".bad-") {
            Some(at) => format!("{}.bad-*", &n[..at]),
            None => n,
        })
        .collect();
    names.sort();
    names
}

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path)
        .unwrap()
        .permissions()
        .mode()
        & 0o7777
}

/// Runs the agent on a cursor `plant`ed as given and checks: both XIDs once, the cursor set
/// aside for `reason` (counted once, one WARN line, no ERROR about the cursor), a fresh 0600
/// cursor of this boot written after.
fn set_aside_and_nothing_missed(plant: Box<dyn FnOnce(&Path) + Send>, reason: &str, what: &str) {
    let base = data_dir();
    let lake = base.path().join("lake");
    let state = state_with(base.path(), plant);
    let bus = unique_bus();
    let stopped = xid_while_down_and_after(&lake, &state, &bus);
    assert_eq!(codes(&lake, &bus), vec![48, 79], "{what}:\n{}", stopped.log);
    let counts = set_aside_counts(&stopped);
    for other in [
        "unreadable",
        "too_large",
        "not_a_file",
        "foreign_owner",
        "ahead_of_log",
    ] {
        let expected = u64::from(other == reason);
        assert_eq!(counts[other], expected, "{what}: {other} in {counts}");
    }
    let warnings: Vec<&str> = stopped
        .log
        .lines()
        .filter(|l| l.contains("kernel-log cursor set aside"))
        .collect();
    assert_eq!(warnings.len(), 1, "{what}:\n{}", stopped.log);
    assert!(warnings[0].contains("WARN"), "{}", warnings[0]);
    assert!(
        warnings[0].contains(&format!("reason=\"{reason}\""))
            || warnings[0].contains(&format!("reason={reason}")),
        "{}",
        warnings[0]
    );
    let cursor_errors = stopped
        .log
        .lines()
        .filter(|l| l.contains("ERROR") && l.contains("cursor"))
        .count();
    assert_eq!(cursor_errors, 0, "{what}:\n{}", stopped.log);
    assert_eq!(
        state_names(&state),
        vec![CURSOR.to_string(), format!("{CURSOR}.bad-*")],
        "{what}"
    );
    let cursor: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(state.join(CURSOR)).unwrap()).unwrap();
    assert_eq!(cursor["boot_id"], boot_id().as_str(), "{what}");
    assert_eq!(mode(&state.join(CURSOR)), 0o600, "{what}");
}

fn write_cursor(path: &Path, seq: u64) {
    std::fs::write(
        path,
        format!("{{\"boot_id\":\"{}\",\"seq\":{seq}}}\n", boot_id()),
    )
    .unwrap();
}

/// What is planted at the cursor's name, the reason it is set aside for, and what it is.
type Case = (Box<dyn FnOnce(&Path) + Send>, &'static str, String);

/// Runs [`set_aside_and_nothing_missed`] for every case at once (each agent reads the whole
/// log: one after the other would take minutes).
fn side_by_side(cases: Vec<Case>) {
    std::thread::scope(|scope| {
        let runs: Vec<_> = cases
            .into_iter()
            .map(|(plant, reason, what)| {
                scope.spawn(move || set_aside_and_nothing_missed(plant, reason, &what))
            })
            .collect();
        let failed = runs.into_iter().filter_map(|run| run.join().err()).count();
        assert_eq!(failed, 0, "see the panics above");
    });
}

#[test]
fn a_cursor_ahead_of_the_kernel_log_is_set_aside_and_no_xid_is_missed() {
    let _shared = support::shared();
    let beyond = last_seq() + 1_000_000;
    side_by_side(vec![
        (
            Box::new(|path: &Path| write_cursor(path, u64::MAX)),
            "ahead_of_log",
            "seq u64::MAX".into(),
        ),
        (
            Box::new(move |path: &Path| write_cursor(path, beyond)),
            "ahead_of_log",
            "seq 1,000,000 past the log".into(),
        ),
    ]);
}

#[test]
fn an_unreadable_cursor_is_set_aside_and_the_xid_logged_while_down_is_read() {
    let _shared = support::shared();
    let boot = boot_id();
    let mut cases: Vec<Case> = Vec::new();
    for (content, what) in [
        ("garbage\u{1}{".to_string(), "garbage"),
        (String::new(), "empty"),
        (format!("{{\"boot_id\":\"{boot}\",\"seq\":-5}}"), "negative"),
        (format!("{{\"boot_id\":\"{boot}\",\"seq\":12.5}}"), "float"),
        (format!("[\"{boot}\", 12]"), "an array"),
    ] {
        cases.push((
            Box::new(move |path: &Path| std::fs::write(path, content).unwrap()),
            "unreadable",
            what.into(),
        ));
    }
    cases.push((
        Box::new(|path: &Path| std::fs::create_dir(path).unwrap()),
        "not_a_file",
        "a directory".into(),
    ));
    cases.push((
        Box::new(|path: &Path| std::os::unix::fs::symlink("/etc/hostname", path).unwrap()),
        "not_a_file",
        "a symlink to elsewhere".into(),
    ));
    // 200 MB (sparse): set aside unread.
    cases.push((
        Box::new(|path: &Path| {
            std::fs::File::create(path)
                .unwrap()
                .set_len(200 << 20)
                .unwrap()
        }),
        "too_large",
        "200 MB".into(),
    ));
    side_by_side(cases);
}

#[test]
fn a_fifo_at_the_cursor_does_not_hang_start_up_or_shutdown() {
    let _shared = support::shared();
    let base = data_dir();
    let lake = base.path().join("lake");
    let state = state_with(base.path(), |path| {
        let c_path = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo(3) with a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
    });
    let bus = unique_bus();
    kmsg(&xid_line(&bus, 48));
    let started = Instant::now();
    let agent = Agent::start(&config(&lake, &state), &[]);
    let address = agent.metrics_address();
    support::wait_until(
        Duration::from_secs(10),
        "/health did not answer 200",
        || support::metrics::http(&address, "GET /health HTTP/1.0\r\n\r\n").0 == 200,
        || agent.log(),
    );
    let healthy_after = started.elapsed();
    let samples = support::metrics::scrape(&address);
    assert_eq!(
        support::metrics::get(
            &samples,
            "gpuship_state_files_set_aside_total{file=\"kmsg_cursor\",reason=\"not_a_file\"}"
        ),
        1
    );
    assert_eq!(
        support::metrics::get(
            &samples,
            "gpuship_state_files_set_aside_total{file=\"kmsg_cursor\",reason=\"ahead_of_log\"}"
        ),
        0
    );
    support::wait_until(
        CATCH_UP,
        "the XID logged while down is not in the lake",
        || codes(&lake, &bus) == [48],
        || agent.log(),
    );
    let stopping = Instant::now();
    let stopped = agent.stop();
    let stop_took = stopping.elapsed();
    assert!(stopped.status.success(), "{}", stopped.log);
    assert!(
        stop_took < Duration::from_secs(10),
        "SIGTERM took {stop_took:?}"
    );
    println!(
        "FIFO cursor: /health 200 after {healthy_after:?}; stopped {stop_took:?} after SIGTERM"
    );
    assert_eq!(codes(&lake, &bus), vec![48]);
    assert_eq!(set_aside_counts(&stopped)["not_a_file"], 1);
    assert_eq!(
        state_names(&state),
        vec![CURSOR.to_string(), format!("{CURSOR}.bad-*")]
    );
}

#[test]
fn a_cursor_others_can_read_is_made_private_and_still_used() {
    let _shared = support::shared();
    let base = data_dir();
    let lake = base.path().join("lake");
    let state = state_with(base.path(), |path| {
        write_cursor(path, last_seq());
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666)).unwrap();
    });
    let agent = Agent::start(&config(&lake, &state), &[]);
    // Before the agent saved a cursor of its own (at most every 5 s without an XID).
    assert_eq!(mode(&state.join(CURSOR)), 0o600, "{}", agent.log());
    let bus = unique_bus();
    kmsg(&xid_line(&bus, 79));
    support::wait_until(
        Duration::from_secs(10),
        "the XID is not in the lake",
        || codes(&lake, &bus) == [79],
        || agent.log(),
    );
    let stopped = agent.stop();
    assert!(stopped.status.success(), "{}", stopped.log);
    assert_eq!(codes(&lake, &bus), vec![79]);
    assert_eq!(mode(&state.join(CURSOR)), 0o600);
    assert_eq!(state_names(&state), vec![CURSOR.to_string()]);
    let counts = set_aside_counts(&stopped);
    assert!(
        counts.as_object().unwrap().values().all(|v| v == 0),
        "{counts}"
    );
    assert!(
        stopped
            .log
            .lines()
            .any(|l| l.contains("WARN") && l.contains("mode=0666") && l.contains(CURSOR)),
        "{}",
        stopped.log
    );
}
