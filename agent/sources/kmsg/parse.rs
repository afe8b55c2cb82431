//! Parsing of `/dev/kmsg` records and the NVIDIA driver's XID lines.
//!
//! This module is pure: it turns bytes the kernel handed us into typed values.
//! It must not do I/O, log, or panic on any input — the bytes come from the
//! kernel or from anyone allowed to write to `/dev/kmsg`, and a panic here
//! would take the agent down and lose every XID that follows.

use std::borrow::Cow;
use std::str::FromStr;

use thiserror::Error;

/// Longest slice of an offending line quoted in an error, so a huge message
/// cannot blow up logs while an operator can still see what was lost.
const MAX_QUOTED_CHARS: usize = 200;

/// Longest code or bus-id token quoted next to the line; real ones are short.
const MAX_QUOTED_TOKEN_CHARS: usize = 32;

/// The driver's XID marker; kernels and `dev_printk` may put a prefix before it.
const XID_MARKER: &str = "NVRM: Xid";

/// One `/dev/kmsg` record: the header fields plus the unescaped message text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KmsgRecord<'a> {
    pub facility: u8,
    pub level: u8,
    pub seq: u64,
    pub timestamp_us: u64,
    pub message: Cow<'a, str>,
}

/// Why a raw `/dev/kmsg` record could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RecordError {
    #[error("empty kmsg record")]
    Empty,
    #[error("kmsg record has no ';' between header and message: {text:?}")]
    MissingSeparator { text: String },
    #[error("kmsg record header has no {field} field")]
    MissingField { field: &'static str },
    #[error("kmsg record header field {field} is invalid: {text:?}")]
    BadField { field: &'static str, text: String },
}

/// Parses one record as returned by a single `read()` of `/dev/kmsg`:
/// `PRIO,SEQ,TS_USEC,FLAGS[,...];MESSAGE\n[ KEY=VALUE\n]...`.
pub fn parse_record(raw: &[u8]) -> Result<KmsgRecord<'_>, RecordError> {
    if raw.is_empty() {
        return Err(RecordError::Empty);
    }
    // The kernel escapes '\n' inside messages, so the first newline ends the
    // record proper; what follows is device metadata we have no use for.
    let first_line = raw.split(|&b| b == b'\n').next().unwrap_or(raw);
    let Some(semi) = first_line.iter().position(|&b| b == b';') else {
        return Err(RecordError::MissingSeparator {
            text: quote_bytes(first_line),
        });
    };
    let (header, message) = first_line.split_at(semi);
    let message = message.get(1..).unwrap_or_default();

    // FLAGS and later fields are deliberately not required: their set has
    // grown across kernel versions and none of them is needed to report an XID.
    let mut fields = header.split(|&b| b == b',');
    let prio: u32 = parse_field(fields.next(), "PRIO")?;
    let seq: u64 = parse_field(fields.next(), "SEQ")?;
    let timestamp_us: u64 = parse_field(fields.next(), "TS_USEC")?;
    let facility = u8::try_from(prio >> 3).map_err(|_| RecordError::BadField {
        field: "PRIO",
        text: prio.to_string(),
    })?;

    Ok(KmsgRecord {
        facility,
        level: (prio & 7) as u8,
        seq,
        timestamp_us,
        message: unescape(message),
    })
}

fn parse_field<T: FromStr>(field: Option<&[u8]>, name: &'static str) -> Result<T, RecordError> {
    let bytes = field.ok_or(RecordError::MissingField { field: name })?;
    std::str::from_utf8(bytes)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| RecordError::BadField {
            field: name,
            text: quote_bytes(bytes),
        })
}

/// Undoes the kernel's `\xNN` escaping. Invalid UTF-8 is replaced rather than
/// rejected: one odd byte in a message must not cost us the XID in it.
fn unescape(raw: &[u8]) -> Cow<'_, str> {
    if !raw.windows(2).any(|w| w == b"\\x") {
        return String::from_utf8_lossy(raw);
    }
    let mut out = Vec::with_capacity(raw.len());
    let mut rest = raw;
    while let Some((&first, tail)) = rest.split_first() {
        if let [b'\\', b'x', hi, lo, after @ ..] = rest {
            if let (Some(hi), Some(lo)) = (hex_value(*hi), hex_value(*lo)) {
                out.push(hi << 4 | lo);
                rest = after;
                continue;
            }
        }
        out.push(first);
        rest = tail;
    }
    Cow::Owned(
        String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into()),
    )
}

fn hex_value(b: u8) -> Option<u8> {
    char::from(b).to_digit(16).map(|d| d as u8)
}

/// An NVIDIA XID report extracted from a kernel message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KmsgXid {
    /// Lowercase `DDDD:BB:DD.F`.
    pub pci_bus_id: String,
    pub code: u32,
    pub pid: Option<i32>,
    pub comm: Option<String>,
    /// Driver text after the code, without the `pid=`/`name=` fields.
    pub message: String,
    /// MIG GPU instance (`GPU-I:01` after the bus id), on MIG-partitioned GPUs.
    pub mig_gpu_instance: Option<u32>,
    /// MIG compute instance (`GPU-CI:02`).
    pub mig_compute_instance: Option<u32>,
}

/// A message that announces an XID but cannot be parsed; every variant
/// carries the (truncated) line so the operator can see which XID was lost.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum XidLineError {
    #[error("XID line has no '(' before the PCI bus id: {line:?}")]
    MissingOpenParen { line: String },
    #[error("XID line has no ')' after the PCI bus id: {line:?}")]
    MissingCloseParen { line: String },
    #[error("XID line has an empty PCI bus id: {line:?}")]
    EmptyBusId { line: String },
    #[error("XID line has an invalid PCI bus id {bus_id:?}: {line:?}")]
    InvalidBusId { bus_id: String, line: String },
    #[error("XID line has no XID code: {line:?}")]
    MissingCode { line: String },
    #[error("XID line has a non-numeric XID code {code:?}: {line:?}")]
    NonNumericCode { code: String, line: String },
    #[error("XID line has an XID code {code:?} that does not fit in 32 bits: {line:?}")]
    CodeOverflow { code: String, line: String },
}

/// Extracts an XID report from a kernel message.
///
/// `Ok(None)` means the message is not an XID line at all; `Err` means it is
/// one but is malformed.
pub fn parse_xid(message: &str) -> Result<Option<KmsgXid>, XidLineError> {
    let Some((_, after_marker)) = message.split_once(XID_MARKER) else {
        return Ok(None);
    };
    let line = || quote(message);

    let Some(after_open) = after_marker.trim_start().strip_prefix('(') else {
        return Err(XidLineError::MissingOpenParen { line: line() });
    };
    let Some((bus_raw, after_close)) = after_open.split_once(')') else {
        return Err(XidLineError::MissingCloseParen { line: line() });
    };
    // `PCI:0000:3b:00 GPU-I:01 GPU-CI:02` on MIG-partitioned GPUs.
    let mut bus_parts = bus_raw.split_whitespace();
    let bus_raw = bus_parts.next().unwrap_or("");
    let mut mig_gpu_instance = None;
    let mut mig_compute_instance = None;
    for part in bus_parts {
        if let Some(gi) = part.strip_prefix("GPU-I:") {
            mig_gpu_instance = gi.parse().ok();
        } else if let Some(ci) = part.strip_prefix("GPU-CI:") {
            mig_compute_instance = ci.parse().ok();
        }
    }
    let pci_bus_id = normalize_bus_id(bus_raw).map_err(|problem| match problem {
        BusIdProblem::Empty => XidLineError::EmptyBusId { line: line() },
        BusIdProblem::Invalid => XidLineError::InvalidBusId {
            bus_id: quote_max(bus_raw, MAX_QUOTED_TOKEN_CHARS),
            line: line(),
        },
    })?;

    // Tolerate a missing ':' after ')': the code is what matters.
    let code_area = skip_separator(after_close, ':');
    let token_end = code_area
        .find([',', ' ', '\t', '\n'])
        .unwrap_or(code_area.len());
    let (token, after_code) = code_area.split_at(token_end);
    let quoted_token = || quote_max(token, MAX_QUOTED_TOKEN_CHARS);
    if token.is_empty() {
        return Err(XidLineError::MissingCode { line: line() });
    }
    if !token.bytes().all(|b| b.is_ascii_digit()) {
        let (code, line) = (quoted_token(), line());
        return Err(XidLineError::NonNumericCode { code, line });
    }
    let Ok(code) = token.parse::<u32>() else {
        let (code, line) = (quoted_token(), line());
        return Err(XidLineError::CodeOverflow { code, line });
    };

    let rest = skip_separator(after_code, ',');
    let (pid_value, rest) = take_field(rest, "pid=");
    let (name_value, rest) = take_field(rest, "name=");
    let pid = pid_value.and_then(|v| v.parse::<i32>().ok());
    let comm = name_value
        .filter(|v| !v.is_empty() && *v != "<unknown>")
        .map(str::to_owned);

    Ok(Some(KmsgXid {
        pci_bus_id,
        code,
        pid,
        comm,
        message: rest.trim_end().to_owned(),
        mig_gpu_instance,
        mig_compute_instance,
    }))
}

/// Skips whitespace, then an optional `sep`, then whitespace.
fn skip_separator(s: &str, sep: char) -> &str {
    let s = s.trim_start();
    s.strip_prefix(sep).unwrap_or(s).trim_start()
}

/// Splits a leading `key=value, ` field off `s`. Values end at ", " because
/// process names may contain spaces but the driver always separates with ", ".
fn take_field<'a>(s: &'a str, key: &str) -> (Option<&'a str>, &'a str) {
    let Some(after_key) = s.strip_prefix(key) else {
        return (None, s);
    };
    match after_key.split_once(", ") {
        Some((value, rest)) => (Some(value), rest.trim_start()),
        None => (Some(after_key.trim_end().trim_end_matches(',')), ""),
    }
}

enum BusIdProblem {
    Empty,
    Invalid,
}

/// Brings the driver's bus id spellings (`PCI:0000:3b:00`, `0000:18:00.0`,
/// `03:00`, ...) to the lowercase `DDDD:BB:DD.F` form sysfs and NVML use, so
/// events from different sources join on the same key.
fn normalize_bus_id(raw: &str) -> Result<String, BusIdProblem> {
    let s = raw.trim();
    let s = match (s.get(..4), s.get(4..)) {
        (Some(prefix), Some(rest)) if prefix.eq_ignore_ascii_case("pci:") => rest,
        _ => s,
    };
    if s.is_empty() {
        return Err(BusIdProblem::Empty);
    }
    // NVIDIA GPUs are always function 0, which older drivers leave out.
    let (addr, function) = s.rsplit_once('.').unwrap_or((s, "0"));
    let parts: Vec<&str> = addr.split(':').collect();
    let (domain, bus, device) = match parts.as_slice() {
        [bus, device] => ("0000", *bus, *device),
        [domain, bus, device] => (*domain, *bus, *device),
        _ => return Err(BusIdProblem::Invalid),
    };
    let is_hex = |part: &str, max_len: usize| {
        !part.is_empty() && part.len() <= max_len && part.bytes().all(|b| b.is_ascii_hexdigit())
    };
    if !(is_hex(domain, 8) && is_hex(bus, 2) && is_hex(device, 2) && is_hex(function, 1)) {
        return Err(BusIdProblem::Invalid);
    }
    Ok(format!("{domain:0>4}:{bus:0>2}:{device:0>2}.{function}").to_ascii_lowercase())
}

fn quote(s: &str) -> String {
    quote_max(s, MAX_QUOTED_CHARS)
}

fn quote_max(s: &str, max_chars: usize) -> String {
    let mut chars = s.chars();
    let mut out: String = chars.by_ref().take(max_chars).collect();
    if chars.next().is_some() {
        out.push('…');
    }
    out
}

fn quote_bytes(b: &[u8]) -> String {
    quote(&String::from_utf8_lossy(b))
}

#[cfg(test)]
mod fuzz_tests;
#[cfg(test)]
mod tests;
