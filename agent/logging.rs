//! Log output on stderr: human-readable text, coloured only when stderr is a terminal (a
//! journal or a file gets no escape codes; `NO_COLOR` turns colour off anywhere), or one JSON
//! object per line (`--log-format json`) for log shippers.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};

use tracing_subscriber::EnvFilter;

/// `--log-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    /// `time LEVEL target: message key=value ...`.
    #[default]
    Text,
    /// One JSON object per line: `timestamp`, `level`, `target`, `fields` (with `message`).
    Json,
}

static JSON: AtomicBool = AtomicBool::new(false);

/// True when logs are JSON: then nothing else may be printed on stderr as plain text.
pub fn json() -> bool {
    JSON.load(Ordering::Relaxed)
}

/// Installs the global subscriber. `RUST_LOG` wins over `level` (an `EnvFilter` directive).
pub fn init(level: &str, format: LogFormat) {
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(level))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder
            .with_ansi(colour(std::io::stderr().is_terminal()))
            .init(),
        LogFormat::Json => {
            JSON.store(true, Ordering::Relaxed);
            builder.json().with_ansi(false).init()
        }
    }
}

/// Colour on a terminal unless `NO_COLOR` is set (to anything but the empty string).
fn colour(terminal: bool) -> bool {
    terminal && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_colour_off_a_terminal() {
        assert!(!colour(false));
    }
}
