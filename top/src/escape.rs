//! Text from outside made safe to print on a terminal. Process names (any local user picks
//! their own), kernel and driver messages, library symbol names and an agent's answers can
//! hold escape sequences that clear the screen, rewrite lines or write the clipboard (OSC 52).
//! Every terminal output of gpuship (`top`, the run summary and progress, `doctor`, `xid`, log
//! fields with names or messages) passes such text through [`escape_controls`]. The one
//! implementation: the daemon re-exports this module as `gpuship::escape`.
//!
//! What is escaped: every Unicode control character (C0 including TAB, CR and LF, DEL, C1),
//! and the invisible characters that reorder or split what a reader sees (bidirectional
//! overrides and isolates, line and paragraph separators). Each becomes a visible escape
//! (`\x1b`, `\r`, `\u{9b}`); everything else, including other non-ASCII text, is kept.
//! Backslashes are not doubled: the output is for people, not for parsing back.

use std::borrow::Cow;
use std::fmt::{self, Write as _};

/// Whether `c` must not reach a terminal as itself.
fn is_unsafe(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061c}'
                | '\u{200b}'..='\u{200f}'
                | '\u{2028}'..='\u{202e}'
                | '\u{2060}'..='\u{2069}'
                | '\u{feff}'
        )
}

fn push_escaped(c: char, out: &mut String) {
    match c {
        '\t' => out.push_str("\\t"),
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        c if (c as u32) < 0x80 => {
            let _ = write!(out, "\\x{:02x}", c as u32);
        }
        c => {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        }
    }
}

/// `text` with every control character written as a visible escape; borrowed when there is
/// none (the usual case).
pub fn escape_controls(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_unsafe) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if is_unsafe(c) {
            push_escaped(c, &mut out);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// [`escape_controls`] as a `Display` value, for `tracing` fields: `comm = %Escaped(&comm)`.
pub struct Escaped<'a>(pub &'a str);

impl fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&escape_controls(self.0))
    }
}

/// A JSON document about to be printed (`doctor --json`), with the characters JSON allows raw
/// inside strings but a terminal would act on (DEL, C1, the invisible reordering ones) written
/// as `\uXXXX`. The document still parses to the same value. C0 characters are already
/// escaped by every JSON encoder.
pub fn escape_json_output(json: &str) -> Cow<'_, str> {
    if !json.chars().any(is_unsafe_in_json) {
        return Cow::Borrowed(json);
    }
    let mut out = String::with_capacity(json.len() + 8);
    for c in json.chars() {
        if is_unsafe_in_json(c) {
            let _ = write!(out, "\\u{:04x}", c as u32);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// [`is_unsafe`] minus what JSON encoders already escape and the whitespace between tokens.
fn is_unsafe_in_json(c: char) -> bool {
    is_unsafe(c) && (c as u32) >= 0x20
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Names a hostile local user can give a process, and what a terminal must show instead.
    const HOSTILE: [(&str, &str); 8] = [
        ("evil\x1b[2Jname", "evil\\x1b[2Jname"),
        ("\x1b]52;c;aGVsbG8=\x07", "\\x1b]52;c;aGVsbG8=\\x07"),
        ("a\rb\nc\td", "a\\rb\\nc\\td"),
        ("bell\x07del\x7f", "bell\\x07del\\x7f"),
        ("c1\u{9b}2J\u{9d}x", "c1\\u{9b}2J\\u{9d}x"),
        ("nul\0esc\x1b", "nul\\x00esc\\x1b"),
        ("rtl\u{202e}gpj.exe", "rtl\\u{202e}gpj.exe"),
        ("plain-name_1 µs ünï", "plain-name_1 µs ünï"),
    ];

    #[test]
    fn every_control_character_becomes_a_visible_escape() {
        for (hostile, shown) in HOSTILE {
            assert_eq!(escape_controls(hostile), shown, "{hostile:?}");
            assert_eq!(Escaped(hostile).to_string(), shown);
        }
        for c in (0u32..0x20).chain(0x7f..0xa0).filter_map(char::from_u32) {
            let escaped = escape_controls(&c.to_string()).into_owned();
            assert!(escaped.starts_with('\\'), "{c:?} -> {escaped:?}");
            assert!(!escaped.chars().any(|c| c.is_control()), "{escaped:?}");
        }
        assert!(matches!(
            escape_controls("cuLaunchKernel"),
            Cow::Borrowed(_)
        ));
        // Escaping is idempotent: escaped text has nothing left to escape.
        let once = escape_controls("x\x1b[31m").into_owned();
        assert_eq!(escape_controls(&once), once);
    }

    #[test]
    fn json_output_keeps_its_value_and_loses_its_raw_controls() {
        let value = serde_json::json!({"detail": "a\u{9b}b\x7f\u{2028}\x1b"});
        let text = serde_json::to_string_pretty(&value).unwrap();
        let safe = escape_json_output(&text);
        assert!(!safe.chars().any(|c| is_unsafe(c) && c != '\n'), "{safe}");
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&safe).unwrap(),
            value
        );
    }
}
