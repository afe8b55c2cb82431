//! Sending one `ExportLogsServiceRequest` to a collector over OTLP/gRPC or OTLP/HTTP, and
//! sorting the answer: accepted (maybe partially), retryable, or refused for good.
//!
//! Built on the OpenTelemetry project's generated protocol types and gRPC client
//! (`opentelemetry-proto`, the layer `opentelemetry-otlp` itself uses), because the accounting
//! needs what the exporter hides: the partial-success count of every response and the exact
//! status of every failure.

use std::time::Duration;

use opentelemetry_proto::tonic::collector::logs::v1::logs_service_client::LogsServiceClient;
use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsServiceRequest, ExportLogsServiceResponse,
};
use prost::Message as _;
use tonic::codec::CompressionEncoding;
use tonic::metadata::{MetadataKey, MetadataValue};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

use super::config::{OtlpCompression, OtlpProtocol, OtlpSinkConfig};
use crate::secret::Secret;

/// A successful export.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Accepted {
    /// Records the collector refused (partial success).
    pub rejected: u64,
}

/// A failed export.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{label}: {message}")]
pub struct ExportError {
    /// Whether a later attempt can succeed.
    pub retryable: bool,
    /// Short stable label for metrics (`grpc_unavailable`, `http_503`, `timeout`, ...).
    pub label: String,
    /// Details for the log.
    pub message: String,
}

/// A connection to one collector.
#[derive(Clone)]
pub enum Exporter {
    /// OTLP/gRPC.
    Grpc {
        /// The generated client.
        client: LogsServiceClient<Channel>,
        /// Request metadata.
        headers: Vec<(
            MetadataKey<tonic::metadata::Ascii>,
            MetadataValue<tonic::metadata::Ascii>,
        )>,
        /// Per-request deadline.
        timeout: Duration,
    },
    /// OTLP/HTTP, protobuf bodies.
    Http {
        /// The HTTP client (connection pool).
        client: reqwest::Client,
        /// Where to POST.
        url: String,
        /// Request headers.
        headers: reqwest::header::HeaderMap,
        /// gzip the body.
        gzip: bool,
    },
}

impl Exporter {
    /// Prepares the connection; nothing is dialled until the first export, so an absent
    /// collector is an outage like any other, not a start-up failure.
    pub fn new(config: &OtlpSinkConfig, headers: &[(String, Secret)]) -> Result<Self, String> {
        let timeout = Duration::from_secs(config.timeout_secs);
        match config.protocol {
            OtlpProtocol::Grpc => {
                let mut endpoint = Endpoint::from_shared(config.endpoint.clone())
                    .map_err(|e| format!("endpoint: {e}"))?
                    .timeout(timeout)
                    .connect_timeout(timeout);
                if config.endpoint.starts_with("https://") {
                    endpoint = endpoint
                        .tls_config(grpc_tls(config)?)
                        .map_err(|e| format!("tls: {e}"))?;
                }
                let mut client = LogsServiceClient::new(endpoint.connect_lazy())
                    .max_decoding_message_size(16 << 20);
                if config.compression == OtlpCompression::Gzip {
                    client = client.send_compressed(CompressionEncoding::Gzip);
                }
                let headers = headers
                    .iter()
                    .map(|(name, value)| {
                        let key = MetadataKey::from_bytes(name.as_bytes())
                            .map_err(|_| format!("header {name}: invalid name"))?;
                        let value = MetadataValue::try_from(value.expose())
                            .map_err(|_| format!("header {name}: invalid value"))?;
                        Ok((key, value))
                    })
                    .collect::<Result<_, String>>()?;
                Ok(Exporter::Grpc {
                    client,
                    headers,
                    timeout,
                })
            }
            OtlpProtocol::HttpProtobuf => {
                let mut builder = reqwest::Client::builder()
                    .timeout(timeout)
                    .connect_timeout(timeout)
                    .user_agent(concat!("gpuship/", env!("CARGO_PKG_VERSION")));
                if let Some(tls) = &config.tls {
                    if let Some(ca) = &tls.ca_file {
                        let pem = read(ca)?;
                        builder = builder.add_root_certificate(
                            reqwest::Certificate::from_pem(&pem)
                                .map_err(|e| format!("tls.ca_file: {e}"))?,
                        );
                    }
                    if let (Some(cert), Some(key)) = (&tls.cert_file, &tls.key_file) {
                        let mut pem = read(cert)?;
                        pem.extend(read(key)?);
                        builder = builder.identity(
                            reqwest::Identity::from_pem(&pem).map_err(|e| format!("tls: {e}"))?,
                        );
                    }
                }
                let client = builder.build().map_err(|e| format!("http client: {e}"))?;
                let mut map = reqwest::header::HeaderMap::new();
                for (name, value) in headers {
                    let key = reqwest::header::HeaderName::from_bytes(name.as_bytes())
                        .map_err(|_| format!("header {name}: invalid name"))?;
                    let mut value = reqwest::header::HeaderValue::from_str(value.expose())
                        .map_err(|_| format!("header {name}: invalid value"))?;
                    value.set_sensitive(true);
                    map.insert(key, value);
                }
                map.insert(
                    reqwest::header::CONTENT_TYPE,
                    reqwest::header::HeaderValue::from_static("application/x-protobuf"),
                );
                Ok(Exporter::Http {
                    client,
                    url: config.request_url(),
                    headers: map,
                    gzip: config.compression == OtlpCompression::Gzip,
                })
            }
        }
    }

    /// Sends one request.
    pub async fn export(&self, request: ExportLogsServiceRequest) -> Result<Accepted, ExportError> {
        match self {
            Exporter::Grpc {
                client,
                headers,
                timeout,
            } => {
                let mut client = client.clone();
                let mut request = tonic::Request::new(request);
                request.set_timeout(*timeout);
                for (key, value) in headers {
                    request.metadata_mut().insert(key.clone(), value.clone());
                }
                match client.export(request).await {
                    Ok(response) => Ok(accepted(response.into_inner())),
                    Err(status) => Err(grpc_error(&status)),
                }
            }
            Exporter::Http {
                client,
                url,
                headers,
                gzip,
            } => {
                let mut body = request.encode_to_vec();
                let mut post = client.post(url).headers(headers.clone());
                if *gzip {
                    body = gzip_bytes(&body);
                    post = post.header(reqwest::header::CONTENT_ENCODING, "gzip");
                }
                let response = post.body(body).send().await.map_err(|err| ExportError {
                    retryable: true,
                    label: if err.is_timeout() {
                        "timeout"
                    } else {
                        "connect"
                    }
                    .into(),
                    message: err.without_url().to_string(),
                })?;
                let status = response.status();
                let bytes = response.bytes().await.unwrap_or_default();
                if status.is_success() {
                    // An empty or undecodable success body is a full success.
                    return Ok(ExportLogsServiceResponse::decode(bytes.as_ref())
                        .map(accepted)
                        .unwrap_or(Accepted { rejected: 0 }));
                }
                Err(ExportError {
                    retryable: http_retryable(status.as_u16()),
                    label: format!("http_{}", status.as_u16()),
                    message: String::from_utf8_lossy(&bytes[..bytes.len().min(300)]).into_owned(),
                })
            }
        }
    }
}

fn read(path: &std::path::Path) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
}

fn grpc_tls(config: &OtlpSinkConfig) -> Result<ClientTlsConfig, String> {
    let mut tls = ClientTlsConfig::new().with_native_roots();
    if let Some(settings) = &config.tls {
        if let Some(ca) = &settings.ca_file {
            tls = tls.ca_certificate(Certificate::from_pem(read(ca)?));
        }
        if let (Some(cert), Some(key)) = (&settings.cert_file, &settings.key_file) {
            tls = tls.identity(Identity::from_pem(read(cert)?, read(key)?));
        }
    }
    Ok(tls)
}

fn accepted(response: ExportLogsServiceResponse) -> Accepted {
    Accepted {
        rejected: response
            .partial_success
            .map(|p| p.rejected_log_records.max(0) as u64)
            .unwrap_or(0),
    }
}

fn gzip_bytes(body: &[u8]) -> Vec<u8> {
    use std::io::Write as _;
    let mut encoder = flate2::write::GzEncoder::new(
        Vec::with_capacity(body.len() / 4),
        flate2::Compression::fast(),
    );
    encoder.write_all(body).expect("writing to memory");
    encoder.finish().expect("writing to memory")
}

/// OTLP/HTTP: 429, 502, 503 and 504 are retryable (the specification's list); so are 401 and
/// 403, because a fixed credential delivers the spooled events, while dropping them would lose
/// XIDs to a rotated token.
pub fn http_retryable(status: u16) -> bool {
    matches!(status, 401 | 403 | 408 | 429 | 502 | 503 | 504)
}

/// OTLP/gRPC: the specification's retryable codes, plus authentication failures (see
/// [`http_retryable`]).
pub fn grpc_error(status: &tonic::Status) -> ExportError {
    use tonic::Code::*;
    let code = status.code();
    let retryable = matches!(
        code,
        Cancelled
            | DeadlineExceeded
            | Aborted
            | OutOfRange
            | Unavailable
            | DataLoss
            | ResourceExhausted
            | Unauthenticated
            | PermissionDenied
            | Unknown
    );
    let name = format!("{code:?}");
    let mut label = String::from("grpc_");
    for (i, c) in name.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            label.push('_');
        }
        label.push(c.to_ascii_lowercase());
    }
    ExportError {
        retryable,
        label,
        message: status.message().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_codes_are_sorted_and_labelled() {
        let unavailable = grpc_error(&tonic::Status::unavailable("connection refused"));
        assert!(unavailable.retryable);
        assert_eq!(unavailable.label, "grpc_unavailable");
        let invalid = grpc_error(&tonic::Status::invalid_argument("bad"));
        assert!(!invalid.retryable);
        assert_eq!(invalid.label, "grpc_invalid_argument");
        assert_eq!(
            grpc_error(&tonic::Status::deadline_exceeded("")).label,
            "grpc_deadline_exceeded"
        );
    }

    #[test]
    fn http_statuses_are_sorted() {
        for status in [429, 502, 503, 504, 401] {
            assert!(http_retryable(status), "{status}");
        }
        for status in [400, 404, 413, 500] {
            assert!(!http_retryable(status), "{status}");
        }
    }
}
