//! Secrets in configuration (Kafka SASL passwords, TLS key passwords, OTLP auth headers): the
//! config names where the value lives, an environment variable or a file, never the value,
//! and the value is only ever held in a [`Secret`] whose `Debug` shows nothing.
//!
//! URLs can carry secrets too (`http://user:password@host`, `?token=...`): every endpoint,
//! broker list or URL that is printed (logs, errors, validation messages) goes through
//! [`redact_url`] first.

use std::fmt;
use std::path::PathBuf;

use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;

/// URL redaction lives in the event model, which the lake shares without linking the sinks.
pub use gpuship_model::redact::{redact_text, redact_url, REDACTED};

/// `{ env = "NAME" }` or `{ file = "/path" }`.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "SecretSyntax")]
pub struct SecretSource {
    /// Environment variable holding the value.
    #[serde(default)]
    pub env: Option<String>,
    /// File holding the value (one trailing newline is removed).
    #[serde(default)]
    pub file: Option<PathBuf>,
}

/// What a config file may hold where a secret goes: a table, or (refused) the value itself.
#[derive(Deserialize)]
#[serde(untagged)]
enum SecretSyntax {
    Source {
        #[serde(default)]
        env: Option<String>,
        #[serde(default)]
        file: Option<PathBuf>,
    },
    Inline(serde::de::IgnoredAny),
}

impl TryFrom<SecretSyntax> for SecretSource {
    type Error = &'static str;

    fn try_from(syntax: SecretSyntax) -> Result<Self, Self::Error> {
        match syntax {
            SecretSyntax::Source { env, file } => Ok(SecretSource { env, file }),
            SecretSyntax::Inline(_) => Err(
                "secrets are not written in the config: use { env = \"NAME\" } or { file = \"/path\" }",
            ),
        }
    }
}

impl fmt::Debug for SecretSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.env, &self.file) {
            (Some(env), _) => write!(f, "env:{env}"),
            (None, Some(file)) => write!(f, "file:{}", file.display()),
            (None, None) => f.write_str("unset"),
        }
    }
}

/// Why a secret could not be read.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    /// Neither or both of `env` and `file`.
    #[error("set exactly one of `env` or `file`")]
    Ambiguous,
    /// The environment variable is not set.
    #[error("environment variable {0} is not set")]
    MissingEnv(String),
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    File {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The value is empty.
    #[error("{0} is empty")]
    Empty(String),
}

impl SecretSource {
    /// A problem with the source's shape (not its value), for config validation.
    pub fn problem(&self) -> Option<String> {
        match (&self.env, &self.file) {
            (Some(_), None) | (None, Some(_)) => None,
            _ => Some(SecretError::Ambiguous.to_string()),
        }
    }

    /// Reads the value now.
    pub fn resolve(&self) -> Result<Secret, SecretError> {
        let (value, origin) = match (&self.env, &self.file) {
            (Some(name), None) => (
                std::env::var(name).map_err(|_| SecretError::MissingEnv(name.clone()))?,
                format!("environment variable {name}"),
            ),
            (None, Some(path)) => {
                let mut text =
                    std::fs::read_to_string(path).map_err(|source| SecretError::File {
                        path: path.clone(),
                        source,
                    })?;
                if text.ends_with('\n') {
                    text.pop();
                    if text.ends_with('\r') {
                        text.pop();
                    }
                }
                (text, path.display().to_string())
            }
            _ => return Err(SecretError::Ambiguous),
        };
        if value.is_empty() {
            return Err(SecretError::Empty(origin));
        }
        Ok(Secret::from(value))
    }
}

/// A secret value, held by [`secrecy::SecretString`] (its memory is zeroed when dropped).
/// `Debug` and `Display` print `<redacted>`; only [`Secret::expose`] gives it.
#[derive(Clone)]
pub struct Secret(SecretString);

impl Secret {
    /// The value, for handing to a client library.
    pub fn expose(&self) -> &str {
        self.0.expose_secret()
    }
}

impl PartialEq for Secret {
    fn eq(&self, other: &Self) -> bool {
        self.expose() == other.expose()
    }
}

impl Eq for Secret {}

impl From<String> for Secret {
    fn from(value: String) -> Self {
        Secret(SecretString::from(value))
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_env_and_file_and_never_prints_the_value() {
        std::env::set_var("GPUSHIP_TEST_SECRET_A", "hunter2");
        let source = SecretSource {
            env: Some("GPUSHIP_TEST_SECRET_A".into()),
            file: None,
        };
        let secret = source.resolve().unwrap();
        assert_eq!(secret.expose(), "hunter2");
        assert_eq!(format!("{secret:?} {secret}"), "<redacted> <redacted>");
        assert_eq!(format!("{source:?}"), "env:GPUSHIP_TEST_SECRET_A");

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pw");
        std::fs::write(&path, "s3cret\n").unwrap();
        let source = SecretSource {
            env: None,
            file: Some(path.clone()),
        };
        assert_eq!(source.resolve().unwrap().expose(), "s3cret");
        assert!(!format!("{source:?}").contains("s3cret"));
    }

    #[test]
    fn missing_or_ambiguous_sources_are_errors() {
        let neither = SecretSource {
            env: None,
            file: None,
        };
        assert_eq!(
            neither.problem().unwrap(),
            "set exactly one of `env` or `file`"
        );
        let missing = SecretSource {
            env: Some("GPUSHIP_TEST_SECRET_UNSET".into()),
            file: None,
        };
        assert_eq!(
            missing.resolve().unwrap_err().to_string(),
            "environment variable GPUSHIP_TEST_SECRET_UNSET is not set"
        );
        let absent = SecretSource {
            env: None,
            file: Some("/nonexistent/pw".into()),
        };
        assert!(absent
            .resolve()
            .unwrap_err()
            .to_string()
            .starts_with("cannot read /nonexistent/pw"));
    }

    #[derive(Debug, Deserialize)]
    struct Holder {
        #[allow(dead_code)]
        password: SecretSource,
    }

    #[test]
    fn an_inline_value_is_refused_without_echoing_it() {
        let err = toml::from_str::<Holder>("password = \"hunter2\"").unwrap_err();
        assert!(err.message().contains("use { env = \"NAME\" }"), "{err}");
        assert!(!err.message().contains("hunter2"), "{err}");
        let ok: Holder = toml::from_str("password = { file = \"/run/pw\" }").unwrap();
        assert_eq!(format!("{ok:?}"), "Holder { password: file:/run/pw }");
    }
}
