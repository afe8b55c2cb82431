//! What a sink type is to the agent: the one trait a sink's config implements, so that a new
//! sink is its folder plus one registration line (the agent's `sink_types!` list in
//! `agent/config/sinks.rs`).
//!
//! The config validates itself (pure, every problem with its key), says which CUDA rows the
//! type takes by default, reads what it needs at start ([`SinkType::check_start`]: secrets,
//! TLS files; failing stops `gpuship run` before capture), builds the running [`Sink`], and
//! checks its destination ([`SinkType::health_check`]: reachable, writable). The health check
//! only reports: a destination that is down at start may come back, and the queue and spool
//! keep the events meanwhile.

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::time::Duration;

use serde::de::DeserializeOwned;

use crate::schema::HostIdentity;
use crate::sink::Sink;

/// What a sink needs from the agent to be built.
#[derive(Debug, Clone, Copy)]
pub struct BuildContext<'a> {
    /// The sink's name (logs, metrics, the spool folder).
    pub name: &'a str,
    /// Host name and boot id, written into every row.
    pub identity: &'a HostIdentity,
    /// The machine id, for sinks that describe the host (OTLP resources).
    pub host_id: Option<&'a str>,
}

/// Which CUDA rows a sink of this type takes when its entry sets no `cuda_filter`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DefaultCudaRows {
    /// Every call.
    All,
    /// Failed calls only (for sinks that pay per event, such as OTLP).
    FailedOnly,
}

/// What a health check found: `Ok` with what was checked, or `Err` with why the destination
/// cannot be used now.
pub type Health = Result<String, String>;

/// The future a health check returns.
pub type HealthCheck = Pin<Box<dyn Future<Output = Health> + Send>>;

/// How long a health check may take before it counts as failed.
pub const HEALTH_CHECK_TIMEOUT: Duration = Duration::from_secs(5);

/// A sink type's config: everything the agent does with a sink besides feeding its queue.
pub trait SinkType: Send + Sync + std::fmt::Debug {
    /// Every problem with the values, as `(key, message)` pairs with keys relative to the
    /// sink's table; empty when valid. Pure: no file or network access.
    fn problems(&self) -> Vec<(String, String)>;

    /// Which CUDA rows the type takes by default.
    fn default_cuda_rows(&self) -> DefaultCudaRows {
        DefaultCudaRows::All
    }

    /// Reads and checks what the sink needs at start (secrets, header values, TLS files). An
    /// error stops `gpuship run` before capture begins: the sink could never work.
    fn check_start(&self) -> Result<(), String> {
        Ok(())
    }

    /// The running sink.
    fn build(&self, context: &BuildContext<'_>) -> Box<dyn Sink>;

    /// Checks the destination now (writable, reachable) within [`HEALTH_CHECK_TIMEOUT`]. Runs
    /// inside the agent's runtime; only reported, never fatal.
    fn health_check(&self) -> HealthCheck {
        Box::pin(async { Ok("nothing to check".to_string()) })
    }
}

/// A sink type as it is registered: its `type` value and how it is read from TOML.
pub trait RegisteredSinkType: SinkType + DeserializeOwned + Clone + PartialEq + 'static {
    /// The `type` value in `[[sinks]]`.
    const TYPE_NAME: &'static str;
}

// Boxing a large config (Kafka) keeps the agent's enum of configs small.
impl<T: SinkType> SinkType for Box<T> {
    fn problems(&self) -> Vec<(String, String)> {
        (**self).problems()
    }
    fn default_cuda_rows(&self) -> DefaultCudaRows {
        (**self).default_cuda_rows()
    }
    fn check_start(&self) -> Result<(), String> {
        (**self).check_start()
    }
    fn build(&self, context: &BuildContext<'_>) -> Box<dyn Sink> {
        (**self).build(context)
    }
    fn health_check(&self) -> HealthCheck {
        (**self).health_check()
    }
}

impl<T: RegisteredSinkType> RegisteredSinkType for Box<T> {
    const TYPE_NAME: &'static str = T::TYPE_NAME;
}

/// `(key, message)` pairs with static keys, as most configs report them, made owned.
pub fn owned_problems(problems: Vec<(&'static str, String)>) -> Vec<(String, String)> {
    problems
        .into_iter()
        .map(|(key, message)| (key.to_string(), message))
        .collect()
}

/// Runs `check` within [`HEALTH_CHECK_TIMEOUT`].
pub async fn within_timeout(check: impl Future<Output = Health>) -> Health {
    tokio::time::timeout(HEALTH_CHECK_TIMEOUT, check)
        .await
        .unwrap_or_else(|_| {
            Err(format!(
                "no answer within {}s",
                HEALTH_CHECK_TIMEOUT.as_secs()
            ))
        })
}

/// Whether a TCP connection to `host:port` opens within the timeout (for endpoints whose
/// protocol has no cheap request of its own).
pub async fn tcp_reachable(address: String) -> Health {
    within_timeout(async move {
        tokio::net::TcpStream::connect(&address)
            .await
            .map(|_| format!("{address} accepts connections"))
            .map_err(|err| format!("cannot connect to {address}: {err}"))
    })
    .await
}

/// Whether the sink could write at `target` (a directory or a file it creates or appends to),
/// without creating anything: an existing `target` must be writable; a missing one needs its
/// nearest existing ancestor to be a writable directory (the sink creates the rest).
pub fn writable(target: &Path) -> Health {
    let mut existing = target;
    while !existing.exists() {
        existing = match existing.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent,
            _ => Path::new("."),
        };
    }
    if existing != target && !existing.is_dir() {
        return Err(format!(
            "{} cannot be created: {} is not a directory",
            target.display(),
            existing.display()
        ));
    }
    if !may_write(existing) {
        return Err(format!("{} is not writable", existing.display()));
    }
    Ok(if existing == target {
        format!("{} is writable", target.display())
    } else {
        format!(
            "{} will be created in {} (writable)",
            target.display(),
            existing.display()
        )
    })
}

/// access(2) with W_OK: what this process may write, read-only mounts included.
fn may_write(path: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(path) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: `path` is a valid NUL-terminated string that outlives the call; access only
    // reads it.
    unsafe { libc::access(path.as_ptr(), libc::W_OK) == 0 }
}

/// `host:port` of a URL such as `https://collector:4318/v1/logs` (the scheme's default port
/// when none is given); None when it has no host.
pub fn host_port(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://").unwrap_or(("http", url));
    let authority = rest.split(['/', '?', '#']).next()?;
    let authority = authority.rsplit_once('@').map_or(authority, |(_, a)| a);
    if authority.is_empty() {
        return None;
    }
    let has_port = match authority.rsplit_once(':') {
        Some((_, port)) => !port.is_empty() && port.chars().all(|c| c.is_ascii_digit()),
        None => false,
    } && !authority.ends_with(']');
    if has_port {
        Some(authority.to_string())
    } else {
        let port = if scheme == "https" { 443 } else { 80 };
        Some(format!("{authority}:{port}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_port_takes_the_authority_and_fills_the_default_port() {
        assert_eq!(
            host_port("http://collector:4318/v1/logs").as_deref(),
            Some("collector:4318")
        );
        assert_eq!(
            host_port("https://otel.example").as_deref(),
            Some("otel.example:443")
        );
        assert_eq!(
            host_port("http://u:p@[::1]:4317").as_deref(),
            Some("[::1]:4317")
        );
        assert_eq!(host_port("http://[::1]").as_deref(), Some("[::1]:80"));
        assert_eq!(host_port("http:///x"), None);
    }

    #[test]
    fn writable_creates_nothing_and_names_what_blocks_it() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("a/b/lake");
        let found = writable(&missing).unwrap();
        assert!(found.contains("will be created"), "{found}");
        assert!(!dir.path().join("a").exists(), "nothing is created");
        assert!(writable(dir.path()).unwrap().contains("is writable"));
        std::fs::write(dir.path().join("file"), b"").unwrap();
        let err = writable(&dir.path().join("file/lake")).unwrap_err();
        assert!(err.contains("is not a directory"), "{err}");
    }

    #[test]
    fn an_unreachable_endpoint_fails_its_check() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        // A port just closed: nothing listens there.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let health = runtime.block_on(tcp_reachable(format!("127.0.0.1:{port}")));
        assert!(health.unwrap_err().contains("cannot connect"));
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let open = listener.local_addr().unwrap().to_string();
        assert!(runtime.block_on(tcp_reachable(open)).is_ok());
    }
}
