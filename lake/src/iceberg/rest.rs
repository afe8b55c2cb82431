//! A client for an Apache Iceberg REST catalog (Apache Polaris, Lakekeeper, Nessie, AWS
//! Glue's and S3 Tables' Iceberg endpoints): the few calls that keep a catalog's entry of each
//! table in step with the table's metadata files ([`super::sync`] decides what to send).
//!
//! Calls: `GET /v1/config` (the catalog's path prefix), create the namespace, load a table,
//! register one from a metadata file, and commit requirements and updates to one. A bearer
//! token, when given, goes in the `Authorization` header and nowhere else (never a log line or
//! an error).

use std::time::Duration;

use anyhow::Context;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use tokio::runtime::Runtime;

/// How long one call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// The largest answer read: a table's metadata with its kept snapshots is well under a MiB, so
/// more is a misbehaving server, not a table.
const MAX_ANSWER_BYTES: usize = 64 << 20;

/// Where the catalog is and which namespace holds gpuship's tables.
#[derive(Debug, Clone)]
pub struct CatalogConfig {
    /// `http(s)://host:port[/path]`, the base the API's `/v1/...` routes hang from.
    pub uri: String,
    /// Namespace levels, `gpuship` or `fleet.gpuship`.
    pub namespace: String,
    /// The warehouse the catalog is asked for (its `?warehouse=`), if it serves several.
    pub warehouse: Option<String>,
    /// A bearer token (`GPUSHIP_CATALOG_TOKEN`).
    pub token: Option<String>,
}

/// A catalog's answer that is not a success.
#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    /// 409: another writer changed the entry since it was loaded (reload and try again).
    #[error("conflict: {0}")]
    Conflict(String),
    /// A call that may succeed later: a 5xx answer, a timeout, a refused connection.
    #[error("{0}")]
    Unavailable(String),
    /// Anything else (400, 401, 403, 404 where none is expected, an answer not JSON).
    #[error("{0}")]
    Refused(String),
}

/// A catalog's entry of a table.
#[derive(Debug, Clone)]
pub struct Entry {
    /// The metadata file the catalog points at.
    pub metadata_location: String,
    /// That file's content, as the catalog returned it.
    pub metadata: Value,
}

/// A connected catalog.
pub struct RestCatalog {
    client: reqwest::Client,
    /// `<uri>/v1/<prefix>/`, or `<uri>/v1/` without a prefix, once the catalog said which.
    base: std::sync::OnceLock<String>,
    namespace: Vec<String>,
    token: Option<String>,
    warehouse: Option<String>,
    uri: String,
}

/// Checks a namespace (`gpuship`, `fleet.gpuship`): levels of letters, digits, `_` and `-`.
pub fn parse_namespace(text: &str) -> anyhow::Result<Vec<String>> {
    let levels: Vec<String> = text.split('.').map(str::to_string).collect();
    for level in &levels {
        anyhow::ensure!(
            !level.is_empty()
                && level
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-'),
            "catalog namespace {text:?}: each dot-separated level must be letters, digits, '_' \
             or '-'"
        );
    }
    Ok(levels)
}

/// Checks the catalog's URI: http or https, no query, no credentials in it.
pub fn parse_uri(text: &str) -> anyhow::Result<String> {
    let trimmed = text.trim_end_matches('/');
    let rest = trimmed
        .strip_prefix("http://")
        .or_else(|| trimmed.strip_prefix("https://"))
        .with_context(|| "the catalog URI must start with http:// or https://".to_string())?;
    anyhow::ensure!(
        !rest.is_empty()
            && !rest.starts_with('/')
            && !rest.contains(['?', '#', '@'])
            && !rest.chars().any(char::is_control),
        "the catalog URI must be http(s)://host[:port][/path], without a query, fragment or \
         credentials (the token goes in GPUSHIP_CATALOG_TOKEN)"
    );
    Ok(trimmed.to_string())
}

impl RestCatalog {
    /// A catalog at `config.uri`, checked but not called yet: the first call asks it for its
    /// configuration (`GET /v1/config`), which may name the path prefix of its routes, so an
    /// unreachable catalog fails each table's sync, not the run.
    pub fn new(config: &CatalogConfig) -> anyhow::Result<RestCatalog> {
        let uri = parse_uri(&config.uri)?;
        let namespace = parse_namespace(&config.namespace)?;
        let client = reqwest::Client::builder()
            .timeout(CALL_TIMEOUT)
            .build()
            .context("building the catalog's HTTP client")?;
        Ok(RestCatalog {
            client,
            base: std::sync::OnceLock::new(),
            namespace,
            token: config.token.clone(),
            warehouse: config.warehouse.clone(),
            uri,
        })
    }

    /// `<uri>/v1/<prefix>/`, asked of the catalog once.
    fn base(&self, runtime: &Runtime) -> Result<&str, CatalogError> {
        if let Some(base) = self.base.get() {
            return Ok(base);
        }
        let path = match &self.warehouse {
            Some(warehouse) => format!("config?warehouse={}", percent_encode(warehouse)),
            None => "config".to_string(),
        };
        let root = format!("{}/v1/", self.uri);
        let (status, body) = runtime.block_on(self.call(&root, Method::GET, &path, None))?;
        if !status.is_success() {
            return Err(self.failure("GET /v1/config", status, &body));
        }
        let prefix = body["overrides"]["prefix"]
            .as_str()
            .or(body["defaults"]["prefix"].as_str())
            .map(|p| p.trim_matches('/'))
            .filter(|p| !p.is_empty());
        // The catalog's own path segments, encoded: a prefix is its text, not a path to follow.
        let base = match prefix {
            Some(prefix) => {
                if prefix
                    .split('/')
                    .any(|segment| segment == "." || segment == "..")
                {
                    return Err(CatalogError::Refused(format!(
                        "{}: the catalog's route prefix \"{}\" climbs out of /v1/",
                        self.uri,
                        printable(prefix)
                    )));
                }
                let segments: Vec<String> = prefix.split('/').map(percent_encode).collect();
                format!("{root}{}/", segments.join("/"))
            }
            None => root,
        };
        Ok(self.base.get_or_init(|| base))
    }

    /// The catalog's URI (no token), for messages.
    pub fn uri(&self) -> &str {
        &self.uri
    }

    /// The namespace as `a.b`, for messages.
    pub fn namespace(&self) -> String {
        self.namespace.join(".")
    }

    fn namespace_path(&self) -> String {
        // Levels are joined by the unit separator, 0x1F, percent-encoded.
        format!("namespaces/{}", self.namespace.join("%1F"))
    }

    /// The entry of table `name`, `None` when the catalog has none.
    pub fn load(&self, runtime: &Runtime, name: &str) -> Result<Option<Entry>, CatalogError> {
        let path = format!("{}/tables/{name}", self.namespace_path());
        let (status, body) = self.send(runtime, Method::GET, &path, None)?;
        if status == StatusCode::NOT_FOUND {
            return Ok(None);
        }
        if !status.is_success() {
            return Err(self.failure("loading the table", status, &body));
        }
        let metadata_location = body["metadata-location"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let metadata = body["metadata"].clone();
        if !metadata.is_object() {
            return Err(CatalogError::Refused(format!(
                "{}: the catalog's answer for {name} holds no metadata",
                self.uri
            )));
        }
        Ok(Some(Entry {
            metadata_location,
            metadata,
        }))
    }

    /// Creates the namespace (one that exists already is fine).
    pub fn create_namespace(&self, runtime: &Runtime) -> Result<(), CatalogError> {
        let body = json!({"namespace": self.namespace, "properties": {}});
        let (status, answer) = self.send(runtime, Method::POST, "namespaces", Some(&body))?;
        if status.is_success() || status == StatusCode::CONFLICT {
            return Ok(());
        }
        Err(self.failure("creating the namespace", status, &answer))
    }

    /// Registers table `name` from `metadata_location`.
    pub fn register(
        &self,
        runtime: &Runtime,
        name: &str,
        metadata_location: &str,
    ) -> Result<(), CatalogError> {
        let path = format!("{}/register", self.namespace_path());
        let body = json!({"name": name, "metadata-location": metadata_location});
        let (status, answer) = self.send(runtime, Method::POST, &path, Some(&body))?;
        if status.is_success() {
            return Ok(());
        }
        Err(self.failure("registering the table", status, &answer))
    }

    /// Commits `updates` to table `name` if its entry still meets `requirements`.
    pub fn commit(
        &self,
        runtime: &Runtime,
        name: &str,
        requirements: &[Value],
        updates: &[Value],
    ) -> Result<(), CatalogError> {
        let path = format!("{}/tables/{name}", self.namespace_path());
        let body = json!({
            "identifier": {"namespace": self.namespace, "name": name},
            "requirements": requirements,
            "updates": updates,
        });
        let (status, answer) = self.send(runtime, Method::POST, &path, Some(&body))?;
        if status.is_success() {
            return Ok(());
        }
        Err(self.failure("committing to the table", status, &answer))
    }

    /// One call to the catalog's routes (`path` under its prefix): the status and the JSON
    /// answer.
    fn send(
        &self,
        runtime: &Runtime,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<(StatusCode, Value), CatalogError> {
        let base = self.base(runtime)?;
        runtime.block_on(self.call(base, method, path, body))
    }

    async fn call(
        &self,
        base: &str,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<(StatusCode, Value), CatalogError> {
        let url = format!("{base}{path}");
        let mut request = self
            .client
            .request(method.clone(), &url)
            .header("Accept", "application/json");
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            request = request
                .header("Content-Type", "application/json")
                .body(body.to_string());
        }
        // reqwest's errors name the URL, which holds no secret (the token is a header).
        let response = request.send().await.map_err(|err| {
            CatalogError::Unavailable(format!("{method} {url}: {}", error_chain(&err)))
        })?;
        let status = response.status();
        let mut response = response;
        let mut bytes = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|err| {
            CatalogError::Unavailable(format!("{method} {url}: reading the answer: {err}"))
        })? {
            if bytes.len() + chunk.len() > MAX_ANSWER_BYTES {
                return Err(CatalogError::Refused(format!(
                    "{method} {url}: an answer of more than {MAX_ANSWER_BYTES} bytes"
                )));
            }
            bytes.extend_from_slice(&chunk);
        }
        if bytes.is_empty() {
            return Ok((status, Value::Null));
        }
        match serde_json::from_slice(&bytes) {
            Ok(value) => Ok((status, value)),
            // A proxy's HTML error page is still an answer with a status.
            Err(_) if !status.is_success() => Ok((status, Value::Null)),
            Err(err) => Err(CatalogError::Refused(format!(
                "{method} {url}: the answer is not JSON: {err}"
            ))),
        }
    }

    /// The error for an unsuccessful `status`, with the catalog's own message.
    fn failure(&self, what: &str, status: StatusCode, body: &Value) -> CatalogError {
        let error = &body["error"];
        let message = format!(
            "{} {what}: {status}{}{}",
            self.uri,
            error["type"]
                .as_str()
                .map(|t| format!(" {}", printable(t)))
                .unwrap_or_default(),
            error["message"]
                .as_str()
                .map(|m| format!(": {}", printable(m)))
                .unwrap_or_default()
        );
        match status {
            StatusCode::CONFLICT => CatalogError::Conflict(message),
            s if s.is_server_error() || s == StatusCode::TOO_MANY_REQUESTS => {
                CatalogError::Unavailable(message)
            }
            _ => CatalogError::Refused(message),
        }
    }
}

/// A catalog's text as one line safe for a terminal (its messages reach one): Rust's own
/// escaping of control and invisible characters (`\n`, `\u{1b}`, `\u{202e}`), cut at 300
/// characters.
fn printable(text: &str) -> String {
    let mut line = String::new();
    for (count, c) in text.chars().enumerate() {
        if count == 300 {
            line.push_str("...");
            break;
        }
        line.extend(c.escape_debug());
    }
    line
}

fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// Percent-encodes everything but unreserved characters (a query value).
fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

#[cfg(test)]
mod tests;
