//! An S3 lake's address and client: [`S3Url`] (`s3://bucket/prefix`, split and checked) and
//! [`ObjectStoreOptions`] (`[sinks.object_store]`: endpoint, region, retries), which builds the
//! `object_store` client both the Parquet sink (writing) and the lake (reading) use.
//!
//! Credentials come from the standard AWS chain as `object_store` reads it: `AWS_*` variables
//! (keys, session token, region, `AWS_ENDPOINT` or `AWS_ENDPOINT_URL`), web identity
//! (`AWS_WEB_IDENTITY_TOKEN_FILE` + `AWS_ROLE_ARN`, i.e. Kubernetes IRSA), the ECS/EKS container
//! endpoint, then the EC2 instance metadata service; never from the URL.

use std::sync::Arc;
use std::time::Duration;

use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::{BackoffConfig, ClientConfigKey, ObjectStore, RetryConfig};
use serde::Deserialize;

/// The object store's error (re-exported so callers need not depend on the crate).
pub type RemoteError = object_store::Error;

/// `s3://bucket/prefix`, split.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct S3Url {
    /// The bucket.
    pub bucket: String,
    /// Key prefix without leading or trailing `/` (may be empty).
    pub prefix: String,
}

impl S3Url {
    /// Parses `s3://bucket[/prefix]`; `None` when `text` is not an `s3://` URL at all, an error
    /// message when it is one but malformed.
    pub fn parse(text: &str) -> Option<Result<Self, String>> {
        let rest = text.strip_prefix("s3://")?;
        // Credentials come from the AWS chain, never from the URL: a query, a fragment or a
        // user before the bucket is refused, and the message shows the URL redacted.
        if rest.contains(['?', '#']) || rest.split('/').next().is_some_and(|b| b.contains('@')) {
            return Some(Err(format!(
                "{:?}: an s3:// URL is `s3://bucket/prefix`, without user, query or fragment \
                 (credentials come from the AWS_* variables, web identity or instance metadata)",
                crate::redact::redact_url(text)
            )));
        }
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        let valid_bucket = (3..=63).contains(&bucket.len())
            && bucket
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.');
        if !valid_bucket {
            return Some(Err(format!(
                "{:?}: the bucket name must be 3 to 63 lowercase letters, digits, '-' or '.'",
                crate::redact::redact_url(text)
            )));
        }
        Some(Ok(Self {
            bucket: bucket.to_string(),
            prefix: prefix.trim_matches('/').to_string(),
        }))
    }
}

impl std::fmt::Display for S3Url {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.prefix.is_empty() {
            write!(f, "s3://{}", self.bucket)
        } else {
            write!(f, "s3://{}/{}", self.bucket, self.prefix)
        }
    }
}

/// `[sinks.object_store]`: settings of an `s3://` destination; all optional.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ObjectStoreOptions {
    /// S3-compatible endpoint (`https://minio.lab:9000`); default: AWS, or `AWS_ENDPOINT` /
    /// `AWS_ENDPOINT_URL` / `AWS_ENDPOINT_URL_S3`.
    #[serde(default)]
    pub endpoint: Option<String>,
    /// Region; default: `AWS_REGION` / `AWS_DEFAULT_REGION`, else `us-east-1`.
    #[serde(default)]
    pub region: Option<String>,
    /// Allow `http://` endpoints (a local test server); off by default.
    #[serde(default)]
    pub allow_http: bool,
    /// Address buckets as `endpoint/bucket` (most S3-compatible servers) rather than
    /// `bucket.endpoint`; default: path style when an endpoint is set (here or in the
    /// environment).
    #[serde(default)]
    pub path_style: Option<bool>,
    /// Retries of one upload before its rows go back to the sink's queue.
    #[serde(default = "defaults::max_retries")]
    pub max_retries: usize,
    /// Give up on one upload after this long, retries included.
    #[serde(default = "defaults::retry_timeout_secs")]
    pub retry_timeout_secs: u64,
    /// Timeout of one HTTP request.
    #[serde(default = "defaults::request_timeout_secs")]
    pub request_timeout_secs: u64,
}

mod defaults {
    pub fn max_retries() -> usize {
        5
    }
    pub fn retry_timeout_secs() -> u64 {
        60
    }
    pub fn request_timeout_secs() -> u64 {
        30
    }
}

impl Default for ObjectStoreOptions {
    fn default() -> Self {
        Self {
            endpoint: None,
            region: None,
            allow_http: false,
            path_style: None,
            max_retries: defaults::max_retries(),
            retry_timeout_secs: defaults::retry_timeout_secs(),
            request_timeout_secs: defaults::request_timeout_secs(),
        }
    }
}

impl ObjectStoreOptions {
    /// Builds the client for `url`: pure (no I/O), so config validation can call it too.
    pub fn build(&self, url: &S3Url) -> Result<Arc<dyn ObjectStore>, RemoteError> {
        install_crypto_provider();
        let mut builder = AmazonS3Builder::from_env().with_bucket_name(&url.bucket);
        if let Some(endpoint) = &self.endpoint {
            builder = builder.with_endpoint(endpoint);
        }
        let path_style = self.path_style(&builder);
        builder = builder.with_virtual_hosted_style_request(!path_style);
        if let Some(region) = &self.region {
            builder = builder.with_region(region);
        }
        if self.allow_http {
            builder = builder.with_allow_http(true);
        }
        let retry = RetryConfig {
            backoff: BackoffConfig {
                init_backoff: Duration::from_millis(100),
                max_backoff: Duration::from_secs(10),
                base: 2.0,
            },
            max_retries: self.max_retries,
            retry_timeout: Duration::from_secs(self.retry_timeout_secs),
        };
        // Client settings go in one key at a time: `with_client_options` would replace what
        // `from_env` and `with_allow_http` already set (allow_http lives in the client options).
        let timeout = format!("{}s", self.request_timeout_secs);
        let store = builder
            .with_config(AmazonS3ConfigKey::Client(ClientConfigKey::Timeout), timeout)
            .with_config(
                AmazonS3ConfigKey::Client(ClientConfigKey::ConnectTimeout),
                "5s",
            )
            .with_retry(retry)
            .build()?;
        Ok(Arc::new(store))
    }

    /// Whether buckets are addressed as `endpoint/bucket`: `path_style` when set, else yes
    /// exactly when a custom endpoint is set, in the config or by any variable the client reads
    /// (`AWS_ENDPOINT`, `AWS_ENDPOINT_URL` as the AWS CLI and SDKs name it,
    /// `AWS_ENDPOINT_URL_S3`). Asking the builder rather than the environment keeps every name
    /// it accepts alike: an endpoint taken with virtual-host addressing would send
    /// `bucket.127.0.0.1` requests that list nothing.
    fn path_style(&self, builder: &AmazonS3Builder) -> bool {
        self.path_style.unwrap_or_else(|| {
            [AmazonS3ConfigKey::Endpoint, AmazonS3ConfigKey::S3Endpoint]
                .iter()
                .any(|key| builder.get_config_value(key).is_some_and(|v| !v.is_empty()))
        })
    }

    /// Every problem with the values, as `(key, message)` pairs.
    pub fn problems(&self) -> Vec<(&'static str, String)> {
        let mut problems = Vec::new();
        if let Some(endpoint) = &self.endpoint {
            if endpoint.starts_with("http://") && !self.allow_http {
                problems.push((
                    "object_store.endpoint",
                    format!(
                        "{:?} is plain HTTP: set allow_http = true to use it",
                        crate::redact::redact_url(endpoint)
                    ),
                ));
            } else if !endpoint.starts_with("http://") && !endpoint.starts_with("https://") {
                problems.push((
                    "object_store.endpoint",
                    format!(
                        "{:?} must start with https:// (or http://)",
                        crate::redact::redact_url(endpoint)
                    ),
                ));
            }
        }
        for (key, value, range) in [
            ("object_store.max_retries", self.max_retries as u64, 0..=100),
            (
                "object_store.retry_timeout_secs",
                self.retry_timeout_secs,
                1..=3_600,
            ),
            (
                "object_store.request_timeout_secs",
                self.request_timeout_secs,
                1..=3_600,
            ),
        ] {
            if let Some(message) = crate::out_of_range(value, range) {
                problems.push((key, message));
            }
        }
        problems
    }
}

/// TLS for the store's HTTP client uses rustls with the ring provider the rest of the agent
/// (tonic) already carries; rustls needs it named once per process.
fn install_crypto_provider() {
    static INSTALL: std::sync::Once = std::sync::Once::new();
    INSTALL.call_once(|| {
        // Err only means another part of the process installed one first: that one is used.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn s3_urls_split_into_bucket_and_prefix() {
        assert_eq!(S3Url::parse("/var/lib/gpuship"), None);
        let url = S3Url::parse("s3://gpu-lake/fleet/a/").unwrap().unwrap();
        assert_eq!(url.bucket, "gpu-lake");
        assert_eq!(url.prefix, "fleet/a");
        assert_eq!(url.to_string(), "s3://gpu-lake/fleet/a");
        let bare = S3Url::parse("s3://gpu-lake").unwrap().unwrap();
        assert_eq!(bare.prefix, "");
        for bad in ["s3://", "s3://Upper/x", "s3://a/x"] {
            let error = S3Url::parse(bad).unwrap().unwrap_err();
            assert!(error.contains("bucket name"), "{bad}: {error}");
        }
    }

    #[test]
    fn s3_urls_with_credentials_are_refused_without_echoing_them() {
        for (bad, shown) in [
            (
                "s3://AKIAEXAMPLE:wJalrXUtnFEMI@gpu-lake/fleet",
                "s3://***@gpu-lake/fleet",
            ),
            (
                "s3://gpu-lake/fleet?X-Amz-Signature=wJalrXUtnFEMI",
                "s3://gpu-lake/fleet?X-Amz-Signature=***",
            ),
            ("s3://gpu-lake#wJalrXUtnFEMI", "s3://gpu-lake#***"),
            ("s3://Bad?token=wJalrXUtnFEMI", "s3://Bad?token=***"),
        ] {
            let error = S3Url::parse(bad).unwrap().unwrap_err();
            assert!(!error.contains("wJalrXUtnFEMI"), "{bad}: {error}");
            assert!(error.starts_with(&format!("{shown:?}: ")), "{bad}: {error}");
        }
    }

    #[test]
    fn option_problems_name_the_key() {
        let options = ObjectStoreOptions {
            endpoint: Some("http://127.0.0.1:9000".into()),
            ..Default::default()
        };
        let keys: Vec<_> = options.problems().into_iter().map(|(k, _)| k).collect();
        assert_eq!(keys, vec!["object_store.endpoint"]);
        let ok = ObjectStoreOptions {
            endpoint: Some("http://127.0.0.1:9000".into()),
            allow_http: true,
            ..Default::default()
        };
        assert!(ok.problems().is_empty());
        let url = S3Url::parse("s3://gpu-lake/p").unwrap().unwrap();
        assert!(ok.build(&url).is_ok());
    }

    #[test]
    fn every_endpoint_variable_means_path_style_unless_told_otherwise() {
        let options = ObjectStoreOptions::default();
        let aws = AmazonS3Builder::new();
        assert!(!options.path_style(&aws), "AWS itself: virtual-host style");
        // `from_env` maps AWS_ENDPOINT and AWS_ENDPOINT_URL to the same key, and
        // AWS_ENDPOINT_URL_S3 to its own; each means a custom server.
        for variable in ["aws_endpoint", "aws_endpoint_url", "aws_endpoint_url_s3"] {
            let key: AmazonS3ConfigKey = variable.parse().unwrap();
            let builder = AmazonS3Builder::new().with_config(key, "http://127.0.0.1:9000");
            assert!(options.path_style(&builder), "{variable}");
            let told = ObjectStoreOptions {
                path_style: Some(false),
                ..Default::default()
            };
            assert!(
                !told.path_style(&builder),
                "{variable}: explicit setting wins"
            );
        }
        let configured = ObjectStoreOptions {
            endpoint: Some("http://127.0.0.1:9000".into()),
            ..Default::default()
        };
        let builder = AmazonS3Builder::new().with_endpoint("http://127.0.0.1:9000");
        assert!(configured.path_style(&builder));
    }
}
