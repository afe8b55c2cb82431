//! Reading the running agent's `GET /live` over plain HTTP/1.1 (the metrics server answers one
//! request per connection and closes it), and the part of the document `top` uses.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

use serde::Deserialize;

use crate::live::{FunctionLive, ProcessLive, XidLive, LIVE_VERSION};

/// The largest answer accepted (the document is a few hundred KiB with 4,096 processes).
const MAX_BODY: u64 = 64 << 20;

/// Why the live view could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// The address does not resolve.
    #[error("cannot resolve {address}: {reason}")]
    Resolve {
        /// As given.
        address: String,
        /// Why.
        reason: String,
    },
    /// Nothing listens, or the connection failed.
    #[error("cannot reach the agent at {address}: {source}")]
    Connect {
        /// As given.
        address: String,
        /// The socket error.
        source: std::io::Error,
    },
    /// The request or the answer broke off.
    #[error("reading /live from {address}: {source}")]
    Io {
        /// As given.
        address: String,
        /// The socket error.
        source: std::io::Error,
    },
    /// Not a 200 answer.
    #[error("{address} answered HTTP {status} to GET /live (not a gpuship agent, or one older than `top`)")]
    Status {
        /// As given.
        address: String,
        /// HTTP status (0 when the answer was not HTTP).
        status: u16,
    },
    /// Not the live document.
    #[error("the answer of {address} to GET /live is not the live view: {source}")]
    Parse {
        /// As given.
        address: String,
        /// The JSON error.
        source: serde_json::Error,
    },
    /// A document version this build does not read.
    #[error("the agent at {address} serves /live version {found}; this gpuship reads version {LIVE_VERSION}")]
    Version {
        /// As given.
        address: String,
        /// The version served.
        found: u64,
    },
}

/// The `/live` document as `top` reads it (unknown fields are ignored).
#[derive(Debug, Clone, Deserialize)]
pub struct LiveReport {
    /// Schema version.
    pub version: u32,
    /// The agent's version.
    #[serde(default)]
    pub agent_version: String,
    /// Seconds since the agent started.
    pub uptime_s: f64,
    /// Per-function totals.
    pub functions: Vec<FunctionLive>,
    /// Per-process totals.
    pub processes: Vec<ProcessLive>,
    /// Processes the agent forgot to stay bounded.
    #[serde(default)]
    pub processes_evicted: u64,
    /// XIDs since start.
    #[serde(default)]
    pub xids_total: u64,
    /// The latest XIDs, oldest first.
    pub xids: Vec<XidLive>,
    /// The agent's counters.
    pub accounting: AccountingReport,
}

/// The counters `top` shows.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct AccountingReport {
    /// Per ring.
    #[serde(default)]
    pub rings: Vec<RingReport>,
    /// Kernel log.
    #[serde(default)]
    pub kmsg: KmsgReport,
    /// Per sink and kind.
    #[serde(default)]
    pub sinks: Vec<SinkReport>,
}

/// One ring's counters.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct RingReport {
    /// `xid`, `cuda` or `driver`.
    pub ring: String,
    /// Lost in the kernel: the ring was full.
    pub lost_in_kernel: u64,
    /// Taken off the ring.
    pub received: u64,
    /// Malformed records.
    pub decode_errors: u64,
    /// CUDA returns without their entry.
    pub unmatched_returns: u64,
    /// CUDA calls not recorded: in-flight table full.
    pub inflight_full: u64,
}

/// Kernel-log counters.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct KmsgReport {
    /// XID lines read.
    pub xids: u64,
    /// Unparseable XID lines.
    pub parse_errors: u64,
    /// Records overwritten before they were read.
    pub lost_gaps: u64,
}

/// One sink's counters for one kind.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct SinkReport {
    /// Sink name.
    pub sink: String,
    /// Event kind.
    pub kind: String,
    /// Acknowledged by the destination.
    pub delivered: u64,
    /// Dropped before the destination.
    pub dropped: u64,
    /// By reason.
    pub dropped_by_reason: BTreeMap<String, u64>,
    /// Lost to destination errors.
    pub failed: u64,
    /// Waiting in the sink's queue (all kinds; repeated on each kind's row).
    pub queued_events: u64,
}

/// Reads `/live` from one agent.
#[derive(Debug, Clone)]
pub struct Client {
    address: String,
    timeout: Duration,
}

impl Client {
    /// A client for `agent` (`host:port`, optionally with `http://` and a trailing `/`).
    pub fn new(agent: &str, timeout: Duration) -> Self {
        let address = agent
            .trim()
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .to_string();
        Self { address, timeout }
    }

    /// The agent's address as used.
    pub fn address(&self) -> &str {
        &self.address
    }

    fn resolve(&self) -> Result<SocketAddr, FetchError> {
        let resolve_error = |reason: String| FetchError::Resolve {
            address: self.address.clone(),
            reason,
        };
        self.address
            .to_socket_addrs()
            .map_err(|e| resolve_error(e.to_string()))?
            .next()
            .ok_or_else(|| resolve_error("no address".into()))
    }

    /// One `GET /live`.
    pub fn fetch(&self) -> Result<LiveReport, FetchError> {
        let address = self.address.clone();
        let io = |source| FetchError::Io {
            address: address.clone(),
            source,
        };
        let mut stream =
            TcpStream::connect_timeout(&self.resolve()?, self.timeout).map_err(|source| {
                FetchError::Connect {
                    address: address.clone(),
                    source,
                }
            })?;
        stream.set_read_timeout(Some(self.timeout)).map_err(io)?;
        stream.set_write_timeout(Some(self.timeout)).map_err(io)?;
        let request = format!(
            "GET /live HTTP/1.1\r\nHost: {}\r\nAccept: application/json\r\nConnection: close\r\n\r\n",
            self.address
        );
        stream.write_all(request.as_bytes()).map_err(io)?;
        let mut answer = Vec::new();
        stream.take(MAX_BODY).read_to_end(&mut answer).map_err(io)?;
        parse_answer(&self.address, &answer)
    }
}

/// The report in an HTTP answer.
fn parse_answer(address: &str, answer: &[u8]) -> Result<LiveReport, FetchError> {
    let split = answer.windows(4).position(|w| w == b"\r\n\r\n");
    let (head, body) = match split {
        Some(at) => (&answer[..at], &answer[at + 4..]),
        None => (answer, &[][..]),
    };
    let status = String::from_utf8_lossy(head)
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    if status != 200 {
        return Err(FetchError::Status {
            address: address.into(),
            status,
        });
    }
    let parse = |source| FetchError::Parse {
        address: address.into(),
        source,
    };
    let document: serde_json::Value = serde_json::from_slice(body).map_err(parse)?;
    let found = document["version"].as_u64().unwrap_or(0);
    if found != u64::from(LIVE_VERSION) {
        return Err(FetchError::Version {
            address: address.into(),
            found,
        });
    }
    serde_json::from_value(document).map_err(parse)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::accounting::Accounting;
    use crate::live::LiveTap;

    fn http(body: &str) -> Vec<u8> {
        format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()
    }

    #[test]
    fn reads_what_the_agent_serves() {
        let tap = LiveTap::new();
        let json = tap.json(Accounting::default().snapshot());
        let report = parse_answer("a:1", &http(&json)).expect("parses");
        assert_eq!(report.version, LIVE_VERSION);
        assert_eq!(report.accounting.rings.len(), 3);
        assert_eq!(report.accounting.rings[1].ring, "cuda");
    }

    #[test]
    fn says_what_is_wrong_with_other_answers() {
        let err = parse_answer("a:1", b"HTTP/1.1 404 Not Found\r\n\r\nnot found\n").unwrap_err();
        assert!(err.to_string().contains("HTTP 404"), "{err}");
        let err = parse_answer("a:1", &http("# HELP x\n")).unwrap_err();
        assert!(matches!(err, FetchError::Parse { .. }), "{err}");
        let err = parse_answer("a:1", &http(r#"{"version":2}"#)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "the agent at a:1 serves /live version 2; this gpuship reads version 1"
        );
        let client = Client::new("http://127.0.0.1:1/", Duration::from_secs(1));
        assert_eq!(client.address(), "127.0.0.1:1");
        let err = client.fetch().unwrap_err();
        assert!(
            err.to_string()
                .starts_with("cannot reach the agent at 127.0.0.1:1:"),
            "{err}"
        );
    }
}
