//! `[[sinks]] type = "otlp"`: endpoint, transport, headers (secrets allowed), TLS, compression,
//! request sizing and the resource attributes users add.

use serde::Deserialize;
use std::collections::BTreeMap;

use crate::limits::out_of_range;
use crate::secret::{redact_url, Secret, SecretError, SecretSource};
use crate::tls::TlsConfig;

/// Transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
pub enum OtlpProtocol {
    /// OTLP/gRPC (default, port 4317).
    #[default]
    #[serde(rename = "grpc")]
    Grpc,
    /// OTLP/HTTP with protobuf bodies (port 4318, path `/v1/logs`).
    #[serde(rename = "http/protobuf")]
    HttpProtobuf,
}

/// Request compression.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum OtlpCompression {
    /// gzip (default).
    #[default]
    Gzip,
    /// None.
    None,
}

/// A header value: plain text, or a secret from the environment or a file.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum HeaderValue {
    /// `{ env = "NAME" }` or `{ file = "/path" }`.
    Secret(SecretSource),
    /// Text written in the config (not for tokens).
    Plain(String),
}

impl HeaderValue {
    fn resolve(&self) -> Result<Secret, SecretError> {
        match self {
            HeaderValue::Secret(source) => source.resolve(),
            HeaderValue::Plain(text) => Ok(Secret::from(text.clone())),
        }
    }
}

/// `[[sinks]] type = "otlp"`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OtlpSinkConfig {
    /// Collector URL: `http://host:4317` (gRPC) or `http://host:4318` (HTTP; `/v1/logs` is
    /// appended when the URL has no path). `https://` uses TLS.
    pub endpoint: String,
    /// `grpc` or `http/protobuf`.
    #[serde(default)]
    pub protocol: OtlpProtocol,
    /// Request headers (e.g. `authorization = { env = "OTLP_TOKEN" }`); values are never logged.
    #[serde(default)]
    pub headers: BTreeMap<String, HeaderValue>,
    /// Request compression.
    #[serde(default)]
    pub compression: OtlpCompression,
    /// Seconds an export may take before it fails (and is retried).
    #[serde(default = "defaults::timeout_secs")]
    pub timeout_secs: u64,
    /// Export requests in flight at once.
    #[serde(default = "defaults::concurrency")]
    pub concurrency: usize,
    /// Log records per export request at most.
    #[serde(default = "defaults::batch_size")]
    pub batch_size: usize,
    /// TLS settings for `https://` endpoints.
    #[serde(default)]
    pub tls: Option<TlsConfig>,
    /// Resource attributes added to (or replacing) gpuship's own; a value `${env:NAME}` is read
    /// from the environment at start (e.g. a Kubernetes node name).
    #[serde(default)]
    pub resource_attributes: BTreeMap<String, String>,
}

mod defaults {
    pub fn timeout_secs() -> u64 {
        10
    }
    pub fn concurrency() -> usize {
        4
    }
    pub fn batch_size() -> usize {
        1000
    }
}

impl OtlpSinkConfig {
    /// A config with every default and the given endpoint.
    pub fn with_endpoint(endpoint: impl Into<String>) -> Self {
        Self {
            endpoint: endpoint.into(),
            protocol: OtlpProtocol::default(),
            headers: BTreeMap::new(),
            compression: OtlpCompression::default(),
            timeout_secs: defaults::timeout_secs(),
            concurrency: defaults::concurrency(),
            batch_size: defaults::batch_size(),
            tls: None,
            resource_attributes: BTreeMap::new(),
        }
    }

    /// Every problem with the values, as `(key, message)` pairs; empty when valid.
    pub fn problems(&self) -> Vec<(String, String)> {
        let mut problems = Vec::new();
        let mut problem = |key: &str, message: String| problems.push((key.to_string(), message));
        match self.endpoint.parse::<http::Uri>() {
            Ok(uri)
                if matches!(uri.scheme_str(), Some("http" | "https")) && uri.host().is_some() => {}
            Ok(_) => problem(
                "endpoint",
                format!(
                    "{:?} must be an http:// or https:// URL with a host",
                    redact_url(&self.endpoint)
                ),
            ),
            Err(err) => problem(
                "endpoint",
                format!("{:?}: {err}", redact_url(&self.endpoint)),
            ),
        }
        for (key, value, range) in [
            ("timeout_secs", self.timeout_secs, 1..=3_600),
            ("concurrency", self.concurrency as u64, 1..=256),
            ("batch_size", self.batch_size as u64, 1..=100_000),
        ] {
            if let Some(message) = out_of_range(value, range) {
                problem(key, message);
            }
        }
        for (name, value) in &self.headers {
            if http::HeaderName::from_bytes(name.as_bytes()).is_err() {
                problem(
                    &format!("headers.{name}"),
                    "is not a valid header name".into(),
                );
            }
            match value {
                HeaderValue::Secret(source) => {
                    if let Some(err) = source.problem() {
                        problem(&format!("headers.{name}"), err);
                    }
                }
                HeaderValue::Plain(text) => {
                    if let Err(err) = check_header_value(text) {
                        problem(&format!("headers.{name}"), err);
                    }
                }
            }
        }
        if let Some(tls) = &self.tls {
            for (key, message) in tls.rustls_problems("otlp") {
                problem(&key, message);
            }
        }
        // Environment values are read at start (the file may be checked elsewhere); only their
        // form is checked here.
        for (key, value) in &self.resource_attributes {
            if value.starts_with("${") && env_name(value).is_none_or(str::is_empty) {
                problem(
                    &format!("resource_attributes.{key}"),
                    format!("{value:?}: write an environment value as ${{env:NAME}}"),
                );
            }
        }
        problems
    }

    /// Header names and their values, read now; a value that cannot be sent in a header (a
    /// secret file or variable with a CR/LF or another control character) is an error that
    /// names the header, never the value.
    pub fn resolved_headers(&self) -> Result<Vec<(String, Secret)>, String> {
        self.headers
            .iter()
            .map(|(name, value)| {
                let secret = value
                    .resolve()
                    .map_err(|err| format!("header {name}: {err}"))?;
                check_header_value(secret.expose())
                    .map_err(|err| format!("header {name}: {err}"))?;
                Ok((name.to_ascii_lowercase(), secret))
            })
            .collect()
    }

    /// Everything the sink reads at start (secrets, `${env:NAME}` values), read and checked
    /// now: the agent calls it before it starts capturing, so a sink that could not start is
    /// an error at start rather than a sink that silently takes nothing.
    pub fn check_start(&self) -> Result<(), String> {
        self.resolved_headers()?;
        self.resolved_resource_attributes()?;
        if let Some(tls) = &self.tls {
            tls.check_files()?;
        }
        Ok(())
    }

    /// Resource attributes with `${env:NAME}` values read now.
    pub fn resolved_resource_attributes(&self) -> Result<BTreeMap<String, String>, String> {
        self.resource_attributes
            .iter()
            .map(|(key, value)| {
                expand_env(value)
                    .map(|value| (key.clone(), value))
                    .map_err(|err| format!("resource attribute {key}: {err}"))
            })
            .collect()
    }

    /// The URL log requests go to (the HTTP transport adds `/v1/logs` to a bare host).
    pub fn request_url(&self) -> String {
        self.signal_url("/v1/logs")
    }

    /// The URL requests go to; the HTTP transport adds `path` (`/v1/metrics`) to a bare host.
    pub fn signal_url(&self, path: &str) -> String {
        match self.protocol {
            OtlpProtocol::Grpc => self.endpoint.clone(),
            OtlpProtocol::HttpProtobuf => {
                let trimmed = self.endpoint.trim_end_matches('/');
                let has_path = trimmed
                    .split_once("://")
                    .is_some_and(|(_, rest)| rest.contains('/'));
                if has_path {
                    self.endpoint.clone()
                } else {
                    format!("{trimmed}{path}")
                }
            }
        }
    }
}

/// Whether `value` can be sent as an HTTP header value (and gRPC ASCII metadata): visible
/// ASCII and spaces/tabs, no CR, LF or other control characters. The value is never quoted in
/// the message: it may be a secret.
fn check_header_value(value: &str) -> Result<(), String> {
    if let Some(c) = value.chars().find(|c| c.is_control() && *c != '\t') {
        let what = match c {
            '\r' | '\n' => "a line break (CR/LF)".to_string(),
            c => format!("the control character U+{:04X}", c as u32),
        };
        return Err(format!(
            "the value contains {what}; not a valid header value"
        ));
    }
    if !value.is_ascii() {
        return Err("the value is not ASCII; not a valid header value".into());
    }
    Ok(())
}

fn env_name(value: &str) -> Option<&str> {
    value
        .strip_prefix("${env:")
        .and_then(|rest| rest.strip_suffix('}'))
}

/// `${env:NAME}` -> the variable's value; anything else is taken as written.
fn expand_env(value: &str) -> Result<String, String> {
    match env_name(value) {
        Some(name) => {
            std::env::var(name).map_err(|_| format!("environment variable {name} is not set"))
        }
        None => Ok(value.to_string()),
    }
}

#[cfg(test)]
mod tests;
