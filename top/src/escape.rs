//! Text from outside made safe to print on a terminal: process names (any local user picks
//! their own) and driver messages can hold escape sequences that clear the screen, rewrite
//! lines or write the clipboard (OSC 52). Every cell `top` shows passes through
//! [`escape_controls`] before it reaches the terminal or the `--once` text.
//!
//! A copy of the daemon's `escape` module's [`escape_controls`] (the same characters, the
//! same escapes), so that this crate does not depend on the daemon; the two are checked
//! against each other by the daemon's tests.
//!
//! What is escaped: every Unicode control character (C0 including TAB, CR and LF, DEL, C1),
//! and the invisible characters that reorder or split what a reader sees (bidirectional
//! overrides and isolates, line and paragraph separators). Each becomes a visible escape
//! (`\x1b`, `\r`, `\u{9b}`); everything else, including other non-ASCII text, is kept.

use std::borrow::Cow;
use std::fmt::Write as _;

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
        let once = escape_controls("x\x1b[31m").into_owned();
        assert_eq!(escape_controls(&once), once);
    }
}
