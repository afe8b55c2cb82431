//! OTLP severity numbers used (from the log data model), and the one mapping from the XID
//! catalog's severities to them.

/// DEBUG.
pub const DEBUG: i32 = 5;
/// INFO.
pub const INFO: i32 = 9;
/// WARN.
pub const WARN: i32 = 13;
/// ERROR.
pub const ERROR: i32 = 17;
/// FATAL.
pub const FATAL: i32 = 21;

/// The number for a catalog severity (`info`, `warning`, `error`, `fatal`); ERROR when
/// unknown.
pub fn from_catalog(severity: Option<&str>) -> i32 {
    match severity {
        Some("info") => INFO,
        Some("warning") => WARN,
        Some("fatal") => FATAL,
        _ => ERROR,
    }
}

/// The text of a severity number.
pub fn text(number: i32) -> &'static str {
    match number {
        INFO => "INFO",
        WARN => "WARN",
        ERROR => "ERROR",
        FATAL => "FATAL",
        _ => "DEBUG",
    }
}
