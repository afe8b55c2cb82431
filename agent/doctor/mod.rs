//! `gpuship doctor`: for every probe gpuship knows, can it work on this host, and if not, why and
//! what to do. Probes are checked by trying (load, attach, detach), not only by reading files.

mod causes;
mod checks;

use serde::Serialize;

pub use causes::Cause;
pub use checks::run_checks;

/// The verdict on one probe or prerequisite.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Check {
    /// What was checked, e.g. `xid_tracepoint` or `cuda:cuLaunchKernel`.
    pub probe: String,
    /// Whether it works here.
    pub ok: bool,
    /// Whether the configuration needs it (a failed required check fails `doctor`).
    pub required: bool,
    /// What was found.
    pub detail: String,
    /// What to do when it does not work.
    pub fix: Option<String>,
}

impl Check {
    pub(crate) fn pass(
        probe: impl Into<String>,
        required: bool,
        detail: impl Into<String>,
    ) -> Self {
        Self {
            probe: probe.into(),
            ok: true,
            required,
            detail: detail.into(),
            fix: None,
        }
    }

    pub(crate) fn fail(
        probe: impl Into<String>,
        required: bool,
        detail: impl Into<String>,
        fix: impl Into<String>,
    ) -> Self {
        Self {
            probe: probe.into(),
            ok: false,
            required,
            detail: detail.into(),
            fix: Some(fix.into()),
        }
    }

    /// A failure whose fix is the one for `cause`.
    pub(crate) fn failed_because(
        probe: impl Into<String>,
        required: bool,
        detail: impl Into<String>,
        cause: &Cause,
    ) -> Self {
        Self::fail(probe, required, detail, cause.fix())
    }
}

/// Whether every required check passed.
pub fn all_required_ok(checks: &[Check]) -> bool {
    checks.iter().filter(|c| c.required).all(|c| c.ok)
}

/// The human report: one line per check, the fix indented under failures.
pub fn render(checks: &[Check]) -> String {
    let mut out = String::new();
    for check in checks {
        let mark = match (check.ok, check.required) {
            (true, _) => "ok  ",
            (false, true) => "FAIL",
            (false, false) => "warn",
        };
        out.push_str(&format!("{mark}  {:<28} {}\n", check.probe, check.detail));
        if let Some(fix) = &check.fix {
            out.push_str(&format!("      {:<28} fix: {fix}\n", ""));
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
}
