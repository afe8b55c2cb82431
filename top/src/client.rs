//! Reading the running agent's `GET /live` over plain HTTP/1.1 (ureq, without TLS: the metrics
//! server is plain HTTP) into a [`LiveReport`], with an error that says what was wrong with the
//! answer.

use std::io;
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
    agent: ureq::Agent,
}

impl Client {
    /// A client for `agent` (`host:port`, optionally with `http://` and a trailing `/`); each
    /// step of a request (connect, send, answer, body) may take `timeout`.
    pub fn new(agent: &str, timeout: Duration) -> Self {
        let address = agent
            .trim()
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .to_string();
        let agent = ureq::Agent::config_builder()
            // The agent is on this host or named by address: no proxy from the environment.
            .proxy(None)
            .max_redirects(0)
            .http_status_as_error(false)
            .timeout_connect(Some(timeout))
            .timeout_send_request(Some(timeout))
            .timeout_recv_response(Some(timeout))
            .timeout_recv_body(Some(timeout))
            .build()
            .new_agent();
        Self { address, agent }
    }

    /// The agent's address as used.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// One `GET /live`.
    pub fn fetch(&self) -> Result<LiveReport, FetchError> {
        let mut response = self
            .agent
            .get(format!("http://{}/live", self.address))
            .header("Accept", "application/json")
            .call()
            .map_err(|err| self.error(err))?;
        let status = response.status().as_u16();
        let body = response
            .body_mut()
            .with_config()
            .limit(MAX_BODY)
            .read_to_vec()
            .map_err(|err| self.error(err))?;
        parse_body(&self.address, status, &body)
    }

    fn error(&self, err: ureq::Error) -> FetchError {
        let address = self.address.clone();
        match err {
            ureq::Error::HostNotFound => FetchError::Resolve {
                address,
                reason: "no address".into(),
            },
            ureq::Error::BadUri(reason) => FetchError::Resolve { address, reason },
            ureq::Error::Io(source)
                if matches!(
                    source.kind(),
                    io::ErrorKind::ConnectionRefused
                        | io::ErrorKind::AddrNotAvailable
                        | io::ErrorKind::HostUnreachable
                        | io::ErrorKind::NetworkUnreachable
                ) =>
            {
                FetchError::Connect { address, source }
            }
            ureq::Error::ConnectionFailed => FetchError::Connect {
                address,
                source: io::Error::other("connection failed"),
            },
            ureq::Error::Io(source) => FetchError::Io { address, source },
            ureq::Error::Timeout(what) => FetchError::Io {
                address,
                source: io::Error::new(io::ErrorKind::TimedOut, format!("timed out ({what})")),
            },
            other => FetchError::Io {
                address,
                source: io::Error::other(other.to_string()),
            },
        }
    }
}

/// The report in an HTTP answer with `status` and `body` (`address` names the agent in errors).
pub fn parse_body(address: &str, status: u16, body: &[u8]) -> Result<LiveReport, FetchError> {
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

    #[test]
    fn says_what_is_wrong_with_other_answers() {
        let err = parse_body("a:1", 404, b"not found\n").unwrap_err();
        assert!(err.to_string().contains("HTTP 404"), "{err}");
        let err = parse_body("a:1", 200, b"# HELP x\n").unwrap_err();
        assert!(matches!(err, FetchError::Parse { .. }), "{err}");
        let err = parse_body("a:1", 200, br#"{"version":2}"#).unwrap_err();
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
