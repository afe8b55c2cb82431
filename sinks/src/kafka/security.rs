//! `[sinks.sasl]` of the Kafka sink, and the librdkafka settings it and `[sinks.tls]` (the
//! shared [`TlsConfig`]) become (secrets read at that moment, never stored in the config).

use rdkafka::ClientConfig;
use serde::Deserialize;

use crate::secret::{SecretError, SecretSource};
use crate::tls::TlsConfig;

/// SASL mechanisms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum SaslMechanism {
    /// Username and password in the clear (use with TLS).
    #[serde(rename = "PLAIN")]
    Plain,
    /// SCRAM with SHA-256.
    #[serde(rename = "SCRAM-SHA-256")]
    ScramSha256,
    /// SCRAM with SHA-512.
    #[serde(rename = "SCRAM-SHA-512")]
    ScramSha512,
}

impl SaslMechanism {
    fn as_librdkafka(self) -> &'static str {
        match self {
            SaslMechanism::Plain => "PLAIN",
            SaslMechanism::ScramSha256 => "SCRAM-SHA-256",
            SaslMechanism::ScramSha512 => "SCRAM-SHA-512",
        }
    }
}

/// `[sinks.sasl]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaSasl {
    /// Mechanism.
    pub mechanism: SaslMechanism,
    /// User name.
    pub username: String,
    /// Password: `{ env = "NAME" }` or `{ file = "/path" }`.
    pub password: SecretSource,
}

/// Sets `security.protocol` and the TLS and SASL properties on `config`.
pub fn apply(
    tls: Option<&TlsConfig>,
    sasl: Option<&KafkaSasl>,
    config: &mut ClientConfig,
) -> Result<(), SecretError> {
    let protocol = match (tls.is_some(), sasl.is_some()) {
        (false, false) => "plaintext",
        (true, false) => "ssl",
        (false, true) => "sasl_plaintext",
        (true, true) => "sasl_ssl",
    };
    config.set("security.protocol", protocol);
    if let Some(tls) = tls {
        for (key, path) in [
            ("ssl.ca.location", &tls.ca_file),
            ("ssl.certificate.location", &tls.cert_file),
            ("ssl.key.location", &tls.key_file),
        ] {
            if let Some(path) = path {
                config.set(key, path.display().to_string());
            }
        }
        if let Some(password) = &tls.key_password {
            config.set("ssl.key.password", password.resolve()?.expose());
        }
        config.set(
            "ssl.endpoint.identification.algorithm",
            if tls.verify_hostname { "https" } else { "none" },
        );
    }
    if let Some(sasl) = sasl {
        config
            .set("sasl.mechanism", sasl.mechanism.as_librdkafka())
            .set("sasl.username", &sasl.username)
            .set("sasl.password", sasl.password.resolve()?.expose());
    }
    Ok(())
}
