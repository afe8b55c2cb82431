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
    /// Whether the collector may have received and kept the records although the export
    /// failed: the request was sent and its outcome is unknown (connection lost mid-request,
    /// gRPC `UNKNOWN`/`CANCELLED`/`DEADLINE_EXCEEDED`, a timeout, a gateway error). A retry
    /// of such an export can deliver the records twice (at-least-once, docs/otlp.md).
    pub maybe_delivered: bool,
    /// Short stable label for metrics (`grpc_unavailable`, `http_503`, `timeout`, ...).
    pub label: String,
    /// Details for the log.
    pub message: String,
}

/// The delivery-error label under which the records of failed exports that may have reached
/// the collector are counted, in addition to their error's own label.
pub const MAYBE_DELIVERED: &str = "maybe_delivered";

/// A connection to one collector.
#[derive(Clone)]
pub enum Exporter {
    /// OTLP/gRPC.
    Grpc {
        /// The connection, shared by the clients of each signal.
        channel: Channel,
        /// gzip requests.
        gzip: bool,
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
        Self::for_signal(config, headers, Signal::Logs)
    }

    /// [`Self::new`] for `signal`: the HTTP transport posts to its path on a bare host.
    pub fn for_signal(
        config: &OtlpSinkConfig,
        headers: &[(String, Secret)],
        signal: Signal,
    ) -> Result<Self, String> {
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
                let channel = endpoint.connect_lazy();
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
                    channel,
                    gzip: config.compression == OtlpCompression::Gzip,
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
                    if let Some(pem) = tls.ca_pem()? {
                        builder = builder.add_root_certificate(
                            reqwest::Certificate::from_pem(&pem)
                                .map_err(|e| format!("tls.ca_file: {e}"))?,
                        );
                    }
                    if let Some((mut pem, key)) = tls.identity_pem()? {
                        pem.extend(key);
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
                    url: config.signal_url(signal.http_path()),
                    headers: map,
                    gzip: config.compression == OtlpCompression::Gzip,
                })
            }
        }
    }

    /// Sends one request.
    pub async fn export(&self, request: ExportLogsServiceRequest) -> Result<Accepted, ExportError> {
        match self {
            Exporter::Grpc { channel, gzip, .. } => {
                let mut client =
                    LogsServiceClient::new(channel.clone()).max_decoding_message_size(16 << 20);
                if *gzip {
                    client = client.send_compressed(CompressionEncoding::Gzip);
                }
                match client.export(self.grpc_request(request)).await {
                    Ok(response) => Ok(accepted(response.into_inner())),
                    Err(status) => Err(grpc_error(&status)),
                }
            }
            Exporter::Http { .. } => {
                // An empty or undecodable success body is a full success.
                let response: Option<ExportLogsServiceResponse> = self.post(&request).await?;
                Ok(response.map(accepted).unwrap_or(Accepted { rejected: 0 }))
            }
        }
    }

    /// A gRPC request with the deadline and the headers (gRPC transport only).
    pub(super) fn grpc_request<T>(&self, message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        if let Exporter::Grpc {
            headers, timeout, ..
        } = self
        {
            request.set_timeout(*timeout);
            for (key, value) in headers {
                request.metadata_mut().insert(key.clone(), value.clone());
            }
        }
        request
    }

    /// POSTs `request` (HTTP transport only) and decodes a successful answer's body, None
    /// when it is empty or not a response.
    pub(super) async fn post<Response: prost::Message + Default>(
        &self,
        request: &impl prost::Message,
    ) -> Result<Option<Response>, ExportError> {
        let Exporter::Http {
            client,
            url,
            headers,
            gzip,
        } = self
        else {
            return Err(ExportError {
                retryable: false,
                maybe_delivered: false,
                label: "transport".into(),
                message: "an HTTP post on a gRPC exporter".into(),
            });
        };
        let mut body = request.encode_to_vec();
        let mut post = client.post(url).headers(headers.clone());
        if *gzip {
            body = gzip_bytes(&body);
            post = post.header(reqwest::header::CONTENT_ENCODING, "gzip");
        }
        let response = post.body(body).send().await.map_err(|err| {
            let (connect, timeout) = (err.is_connect(), err.is_timeout());
            http_send_error(connect, timeout, err.without_url().to_string())
        })?;
        let status = response.status();
        let bytes = response.bytes().await.unwrap_or_default();
        if status.is_success() {
            return Ok(Response::decode(bytes.as_ref()).ok());
        }
        Err(http_status_error(
            status.as_u16(),
            String::from_utf8_lossy(&bytes[..bytes.len().min(300)]).into_owned(),
        ))
    }
}

/// What an exporter sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// `ExportLogsServiceRequest`s (the sink).
    Logs,
    /// `ExportMetricsServiceRequest`s (the agent's health metrics).
    Metrics,
}

impl Signal {
    /// The OTLP/HTTP path of the signal.
    pub fn http_path(self) -> &'static str {
        match self {
            Signal::Logs => "/v1/logs",
            Signal::Metrics => "/v1/metrics",
        }
    }
}

fn grpc_tls(config: &OtlpSinkConfig) -> Result<ClientTlsConfig, String> {
    let mut tls = ClientTlsConfig::new().with_native_roots();
    if let Some(settings) = &config.tls {
        if let Some(ca) = settings.ca_pem()? {
            tls = tls.ca_certificate(Certificate::from_pem(ca));
        }
        if let Some((cert, key)) = settings.identity_pem()? {
            tls = tls.identity(Identity::from_pem(cert, key));
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

/// An OTLP/HTTP request that got no response. Retryable. Only a failed connection proves the
/// collector never saw the request; after a timeout or a connection lost mid-request it may
/// have kept the records.
pub fn http_send_error(connect: bool, timeout: bool, message: String) -> ExportError {
    let label = if connect {
        "connect"
    } else if timeout {
        "timeout"
    } else {
        "connection_lost"
    };
    ExportError {
        retryable: true,
        maybe_delivered: !connect,
        label: label.into(),
        message,
    }
}

/// An OTLP/HTTP response with a failure status. A gateway's 502 or 504 may come after the
/// collector behind it took the request; any other status is the collector's own answer.
pub fn http_status_error(status: u16, message: String) -> ExportError {
    ExportError {
        retryable: http_retryable(status),
        maybe_delivered: matches!(status, 502 | 504),
        label: format!("http_{status}"),
        message,
    }
}

/// OTLP/gRPC: the specification's retryable codes, plus authentication failures (see
/// [`http_retryable`]). `UNKNOWN` (what a connection lost mid-request reads as), `CANCELLED`
/// and `DEADLINE_EXCEEDED` leave the outcome unknown: the collector may have kept the records.
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
        maybe_delivered: matches!(code, Unknown | Cancelled | DeadlineExceeded),
        label,
        message: status.message().to_string(),
    }
}

#[cfg(test)]
mod tests;
