//! `[sinks.tls]`: the TLS settings of the Kafka and OTLP sinks (and of `[metrics.otlp]`), one
//! type with the same keys for both. Each client maps it to its own settings: Kafka to
//! librdkafka's `ssl.*` properties (`kafka::security`), OTLP to rustls through tonic or reqwest
//! (`otlp::transport`). The key's password is a secret, read when the client is built.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::secret::SecretSource;

fn yes() -> bool {
    true
}

/// `[sinks.tls]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// CA bundle (PEM) to verify the server with (default: the system's roots).
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// Client certificate (PEM), for mutual TLS.
    #[serde(default)]
    pub cert_file: Option<PathBuf>,
    /// Client key (PEM), for mutual TLS.
    #[serde(default)]
    pub key_file: Option<PathBuf>,
    /// Password of an encrypted client key (Kafka only).
    #[serde(default)]
    pub key_password: Option<SecretSource>,
    /// Check that the server's certificate names the host connected to (default true; only
    /// Kafka can turn it off).
    #[serde(default = "yes")]
    pub verify_hostname: bool,
}

impl TlsConfig {
    /// The files that are set, with their keys (`tls.ca_file`).
    pub fn files(&self) -> impl Iterator<Item = (&'static str, &Path)> {
        [
            ("tls.ca_file", &self.ca_file),
            ("tls.cert_file", &self.cert_file),
            ("tls.key_file", &self.key_file),
        ]
        .into_iter()
        .filter_map(|(key, path)| Some((key, path.as_deref()?)))
    }

    /// Problems with the values every client has, as `(key, message)` pairs.
    pub fn problems(&self) -> Vec<(String, String)> {
        let mut problems = Vec::new();
        if let Some(err) = self.key_password.as_ref().and_then(SecretSource::problem) {
            problems.push(("tls.key_password".to_string(), err));
        }
        problems
    }

    /// [`Self::problems`] and the settings a rustls client (OTLP) cannot honour: an encrypted
    /// key, and not checking the host name.
    pub fn rustls_problems(&self, sink: &str) -> Vec<(String, String)> {
        let mut problems = self.problems();
        if self.key_password.is_some() {
            problems.push((
                "tls.key_password".to_string(),
                format!("the {sink} client reads unencrypted PEM keys only"),
            ));
        }
        if !self.verify_hostname {
            problems.push((
                "tls.verify_hostname".to_string(),
                format!("the {sink} client always checks the host name"),
            ));
        }
        problems
    }

    /// Each file set is there: `tls.ca_file /path: No such file or directory` otherwise.
    pub fn check_files(&self) -> Result<(), String> {
        for (key, path) in self.files() {
            std::fs::metadata(path).map_err(|err| format!("{key} {}: {err}", path.display()))?;
        }
        Ok(())
    }

    /// The CA bundle's PEM, read now.
    pub fn ca_pem(&self) -> Result<Option<Vec<u8>>, String> {
        self.ca_file.as_deref().map(read).transpose()
    }

    /// The client certificate's and key's PEM, read now, when both are set.
    pub fn identity_pem(&self) -> Result<Option<IdentityPem>, String> {
        match (&self.cert_file, &self.key_file) {
            (Some(cert), Some(key)) => Ok(Some((read(cert)?, read(key)?))),
            _ => Ok(None),
        }
    }
}

/// A client certificate's PEM and its key's PEM.
pub type IdentityPem = (Vec<u8>, Vec<u8>);

fn read(path: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_sinks_read_the_same_keys_and_rustls_refuses_what_it_cannot_do() {
        let tls: TlsConfig = toml::from_str(
            "ca_file = \"/nonexistent/ca.pem\"\nkey_file = \"/k\"\n\
             key_password = { env = \"K\" }\nverify_hostname = false\n",
        )
        .unwrap();
        assert_eq!(
            tls.files().collect::<Vec<_>>(),
            [
                ("tls.ca_file", Path::new("/nonexistent/ca.pem")),
                ("tls.key_file", Path::new("/k"))
            ]
        );
        assert_eq!(tls.problems(), []);
        assert_eq!(
            tls.rustls_problems("otlp"),
            [
                (
                    "tls.key_password".to_string(),
                    "the otlp client reads unencrypted PEM keys only".to_string()
                ),
                (
                    "tls.verify_hostname".to_string(),
                    "the otlp client always checks the host name".to_string()
                ),
            ]
        );
        assert!(tls
            .check_files()
            .unwrap_err()
            .starts_with("tls.ca_file /nonexistent/ca.pem: "));
        assert_eq!(tls.identity_pem(), Ok(None));
        let defaults: TlsConfig = toml::from_str("").unwrap();
        assert!(defaults.verify_hostname);
        assert_eq!(defaults.rustls_problems("otlp"), []);
        assert!(toml::from_str::<TlsConfig>("ca = \"/etc/ca.pem\"")
            .unwrap_err()
            .to_string()
            .contains("unknown field `ca`"));
    }
}
