//! `gpuship doctor`: for every probe gpuship knows, can it work on this host, and if not, why and
//! what to do. Probes are checked by trying (load, attach, detach), not only by reading files.

mod checks;

pub use crate::diagnosis::{Cause, Check};
pub use checks::run_checks;

/// Whether every required check passed.
pub fn all_required_ok(checks: &[Check]) -> bool {
    checks.iter().filter(|c| c.required).all(|c| c.ok)
}

/// The human report: one line per check, the fix indented under failures. Details quote
/// paths, symbols and kernel answers: their control characters are escaped.
pub fn render(checks: &[Check]) -> String {
    use crate::escape::Escaped;
    let mut out = String::new();
    for check in checks {
        let mark = match (check.ok, check.required) {
            (true, _) => "ok  ",
            (false, true) => "FAIL",
            (false, false) => "warn",
        };
        out.push_str(&format!(
            "{mark}  {:<28} {}\n",
            Escaped(&check.probe).to_string(),
            Escaped(&check.detail)
        ));
        if let Some(fix) = &check.fix {
            out.push_str(&format!("      {:<28} fix: {}\n", "", Escaped(fix)));
        }
    }
    let verdict = if all_required_ok(checks) {
        "every configured source can run"
    } else {
        "some configured sources cannot run"
    };
    out.push_str(&format!("\n{verdict}\n"));
    out
}

/// The checks as pretty JSON for `doctor --json`, safe to print on a terminal.
pub fn render_json(checks: &[Check]) -> serde_json::Result<String> {
    let json = serde_json::to_string_pretty(checks)?;
    Ok(crate::escape::escape_json_output(&json).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_required_failures_fail_the_verdict() {
        let checks = vec![
            Check::pass("a", true, "fine"),
            Check::fail("b", false, "missing", "install b"),
        ];
        assert!(all_required_ok(&checks));
        let text = render(&checks);
        assert!(text.contains("warn  b"), "{text}");
        assert!(text.contains("fix: install b"), "{text}");
        let failing = vec![Check::fail("c", true, "absent", "load c")];
        assert!(!all_required_ok(&failing));
        assert!(render(&failing).contains("FAIL  c"));
    }

    #[test]
    fn hostile_text_in_a_check_is_escaped_in_both_outputs() {
        let checks = vec![Check::fail(
            "cuda:cu\x1b[2Jx",
            true,
            "symbol \x1b]52;c;aGk=\x07 in /tmp/\rlib\u{9b}",
            "remove \x7f",
        )];
        let text = render(&checks);
        assert!(
            !text.chars().any(|c| c.is_control() && c != '\n'),
            "{text:?}"
        );
        assert!(text.contains("cuda:cu\\x1b[2Jx"), "{text}");
        assert!(
            text.contains("symbol \\x1b]52;c;aGk=\\x07 in /tmp/\\rlib\\u{9b}"),
            "{text}"
        );
        assert!(text.contains("fix: remove \\x7f"), "{text}");
        let json = render_json(&checks).unwrap();
        assert!(
            !json.chars().any(|c| c.is_control() && c != '\n'),
            "{json:?}"
        );
        let back: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(back[0]["detail"], checks[0].detail);
    }
}
