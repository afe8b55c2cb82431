//! Reading the running agent's `GET /live` over plain HTTP/1.1 (the metrics server answers one
//! request per connection and closes it) into a [`LiveReport`], with an error that says what
//! was wrong with the answer.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

use crate::wire::{LiveReport, LIVE_VERSION};

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

/// The report in an HTTP answer (`address` names the agent in errors).
pub fn parse_answer(address: &str, answer: &[u8]) -> Result<LiveReport, FetchError> {
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

    fn http(body: &str) -> Vec<u8> {
        format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()
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
