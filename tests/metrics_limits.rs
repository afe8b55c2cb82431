//! The metrics endpoint under a descriptor attack (issue 17, item 8): with the systemd default
//! of 1,024 descriptors, 1,100 idle connections from any local user must not take the
//! descriptors capture and sinks need. The agent keeps at most `[metrics] max_connections`
//! sockets, `/health` and `/metrics` answer on a new connection, and a Parquet sink keeps
//! writing.

use std::io::{ErrorKind, Read};
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::support;
use crate::support::agent::{binary, data_dir, Agent};
use crate::support::metrics::{get, scrape};
use crate::support::{lake, wait_until, Fixtures};

/// `[metrics] max_connections` of the attack test.
const LIMIT: usize = 64;
/// Connections the attacker keeps open.
const ATTACK: usize = 1100;

/// Sets a process's RLIMIT_NOFILE (root may lower another process's limits).
fn set_open_file_limit(pid: u32, soft: u64, hard: u64) {
    let limit = libc::rlimit {
        rlim_cur: soft,
        rlim_max: hard,
    };
    // SAFETY: prlimit reads a struct we own and writes nothing (old_limit is null).
    let rc = unsafe {
        libc::prlimit(
            pid as libc::pid_t,
            libc::RLIMIT_NOFILE,
            &limit,
            std::ptr::null_mut(),
        )
    };
    assert_eq!(rc, 0, "prlimit: {}", std::io::Error::last_os_error());
}

/// This test process needs more than [`ATTACK`] descriptors itself.
fn raise_own_open_file_limit() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into a struct we own.
    assert_eq!(
        unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) },
        0
    );
    assert!(
        limit.rlim_max as usize > ATTACK + 200,
        "the test needs {} descriptors; hard limit {}",
        ATTACK + 200,
        limit.rlim_max
    );
    set_open_file_limit(std::process::id(), limit.rlim_max, limit.rlim_max);
}

/// Socket inodes of TCP connections (not the listener) whose local port is `port`.
fn connections_on_port(port: u16) -> Vec<u64> {
    let mut inodes = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let local_port = fields[1].rsplit(':').next().unwrap();
            let listening = fields[3] == "0A";
            if u16::from_str_radix(local_port, 16) == Ok(port) && !listening {
                inodes.push(fields[9].parse().unwrap());
            }
        }
    }
    inodes
}

/// The agent's open descriptors: (all of them, those that are connections on `port`).
fn descriptors(pid: u32, port: u16) -> (usize, usize) {
    let on_port = connections_on_port(port);
    let mut total = 0;
    let mut held = 0;
    for entry in std::fs::read_dir(format!("/proc/{pid}/fd")).expect("/proc/PID/fd") {
        let Ok(target) = std::fs::read_link(entry.expect("fd entry").path()) else {
            continue; // closed while we looked
        };
        total += 1;
        let target = target.display().to_string();
        let inode = target
            .strip_prefix("socket:[")
            .and_then(|t| t.strip_suffix(']'))
            .and_then(|t| t.parse::<u64>().ok());
        held += usize::from(inode.is_some_and(|i| on_port.contains(&i)));
    }
    (total, held)
}

/// True once the peer closed `stream` (it is non-blocking).
fn closed_by_peer(stream: &mut TcpStream) -> bool {
    let mut byte = [0u8; 1];
    match stream.read(&mut byte) {
        Ok(0) => true,
        Ok(_) => false,
        Err(err) => err.kind() != ErrorKind::WouldBlock,
    }
}

/// Opens idle connections until `ATTACK` are open on our side, replacing those the agent
/// closes, until `stop`.
fn attacker(address: String, stop: Arc<AtomicBool>, opened: Arc<std::sync::atomic::AtomicUsize>) {
    let mut streams: Vec<TcpStream> = Vec::with_capacity(ATTACK);
    while !stop.load(Ordering::Relaxed) {
        streams.retain_mut(|s| !closed_by_peer(s));
        while streams.len() < ATTACK {
            let stream = TcpStream::connect(&address).expect("attacker connect");
            stream.set_nonblocking(true).expect("nonblocking");
            streams.push(stream);
            opened.fetch_add(1, Ordering::Relaxed);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn idle_connections_leave_capture_and_sinks_their_descriptors() {
    let _shared = support::shared();
    raise_own_open_file_limit();
    let fixtures = Fixtures::build();
    let data = data_dir();
    // Accounting documents and progress only every minute: nothing opens files while the
    // baseline is taken.
    let config = fixtures
        .cuda_config(data.path(), r#"["default"]"#)
        .replace("progress_interval_secs = 1", "progress_interval_secs = 60")
        + &format!(
            "max_file_age_secs = 1\n\n[metrics]\naddress = \"127.0.0.1:0\"\nmax_connections = {LIMIT}\n"
        );
    let agent = Agent::start(&config, &[]);
    let pid = agent.pid();
    // systemd's default soft limit, and as the hard one too, so that the agent's raise of
    // its soft limit at start cannot help: only the server's own limit can.
    set_open_file_limit(pid, 1024, 1024);
    let address = agent.metrics_address();
    let port: u16 = address.rsplit(':').next().unwrap().parse().unwrap();
    assert!(!scrape(&address).is_empty());
    let (baseline, held) = descriptors(pid, port);
    assert_eq!(held, 0);
    assert!(
        baseline + LIMIT < 1024,
        "baseline {baseline} leaves no room for the test"
    );

    let stop = Arc::new(AtomicBool::new(false));
    let opened = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let attack = {
        let (address, stop, opened) = (address.clone(), stop.clone(), opened.clone());
        std::thread::spawn(move || attacker(address, stop, opened))
    };
    wait_until(
        Duration::from_secs(60),
        "the attacker never opened its connections",
        || opened.load(Ordering::Relaxed) >= ATTACK,
        || agent.log(),
    );
    let mut most = (0, 0);
    for _ in 0..20 {
        let (total, held) = descriptors(pid, port);
        assert!(held <= LIMIT, "{held} connections held, limit {LIMIT}");
        assert!(
            total <= baseline + LIMIT,
            "{total} descriptors open, baseline {baseline} + limit {LIMIT}"
        );
        most = most.max((total, held));
        std::thread::sleep(Duration::from_millis(50));
    }
    eprintln!("under attack: at most {} descriptors, {} of them metrics connections (baseline {baseline})", most.0, most.1);

    // A probe and a scrape on new connections are answered (a 30 s read timeout, no timing).
    for _ in 0..3 {
        let mut health = TcpStream::connect(&address).expect("connect");
        health
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        std::io::Write::write_all(&mut health, b"GET /health HTTP/1.1\r\n\r\n").unwrap();
        let mut answer = String::new();
        health.read_to_string(&mut answer).expect("health answered");
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer:?}");
        assert!(answer.ends_with("ok\n"), "{answer:?}");
        let metrics = scrape(&address);
        assert_eq!(
            get(&metrics, "gpuship_ring_pending_events{ring=\"xid\"}"),
            0
        );
    }

    // Capture and the Parquet sink keep working under the attack.
    let started = Instant::now();
    let (_, out) = fixtures.run_workload(&["launches", "20000"], &[]);
    assert!(out.contains("calls=20000"), "{out}");
    eprintln!("workload under attack took {:?}", started.elapsed());
    // (Descriptors are not compared to the baseline here: the sink opens its files now.)
    assert!(descriptors(pid, port).1 <= LIMIT);
    stop.store(true, Ordering::Relaxed);
    attack.join().expect("attacker");

    let stopped = agent.stop();
    assert!(stopped.status.success(), "{}", stopped.log);
    assert!(
        !stopped.log.contains("Too many open files"),
        "{}",
        stopped.log
    );
    let delivered = stopped.assert_nothing_lost("cuda", "cuda");
    assert!(delivered >= 20000, "{delivered}");
    let rows: usize = lake::read_table(data.path(), "cuda")
        .iter()
        .map(|b| b.num_rows())
        .sum();
    assert_eq!(rows as u64, delivered);
}

#[test]
fn the_soft_open_file_limit_is_raised_to_the_hard_one_at_start() {
    let _shared = support::shared();
    let fixtures = Fixtures::build();
    let data = data_dir();
    let state = data_dir();
    let config_path = state.path().join("gpuship.toml");
    let state_dir = format!("[agent]\nstate_dir = \"{}\"\n", state.path().display());
    let config = fixtures
        .cuda_config(data.path(), r#"["default"]"#)
        .replacen("[agent]\n", &state_dir, 1)
        + "\n[metrics]\naddress = \"127.0.0.1:0\"\n";
    std::fs::write(&config_path, config).unwrap();
    let mut command = Command::new(binary());
    command
        .args(["run", "--config"])
        .arg(&config_path)
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    // SAFETY: between fork and exec only setrlimit(2), which is async-signal-safe.
    unsafe {
        command.pre_exec(|| {
            let limit = libc::rlimit {
                rlim_cur: 1024,
                rlim_max: 4096,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = command.spawn().expect("start gpuship");
    let pid = child.id();
    let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut log = String::new();
    loop {
        let mut line = String::new();
        let n = std::io::BufRead::read_line(&mut stderr, &mut line).unwrap();
        log.push_str(&line);
        if n == 0 || line.contains("capture started") {
            break;
        }
    }
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    let _ = std::io::copy(&mut stderr, &mut std::io::sink());
    child.wait().unwrap();
    let line = log
        .lines()
        .find(|l| l.contains("open file limit"))
        .unwrap_or_else(|| panic!("{log}"));
    assert!(
        line.contains("soft=4096 hard=4096 previous_soft=1024"),
        "{line}"
    );
    let open_files = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap();
    assert_eq!(
        open_files.split_whitespace().collect::<Vec<_>>()[3..5],
        ["4096", "4096"],
        "{open_files}"
    );
}
