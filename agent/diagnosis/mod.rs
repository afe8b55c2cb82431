//! What a check of the host found and what to do about it: the vocabulary `gpuship doctor`
//! and every capture source share. Each source checks its own probes
//! ([`RingSource::doctor`](crate::sources::RingSource::doctor)) against the host facts the
//! doctor reads once ([`HostFacts`]), and says why one cannot run as a [`Cause`], whose fix
//! comes from one place.

mod causes;

use std::path::{Path, PathBuf};

use serde::Serialize;

pub use causes::{fixes, refusal_or, Cause};

/// What several sources' checks need to know about the host, read once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostFacts {
    /// Where tracefs is mounted (mounted by the doctor if it was not), or None.
    pub tracefs_root: Option<PathBuf>,
    /// The kernel's lockdown mode (`none`, `integrity`, `confidentiality`), or None without
    /// the lockdown LSM: checks tell a lockdown refusal from other failures with it.
    pub lockdown: Option<String>,
    /// The process table the checks look through (`/proc`).
    pub proc_dir: PathBuf,
}

impl HostFacts {
    /// The lockdown mode as the cause helpers take it.
    pub fn lockdown(&self) -> Option<&str> {
        self.lockdown.as_deref()
    }
}

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
    pub fn pass(probe: impl Into<String>, required: bool, detail: impl Into<String>) -> Self {
        Self {
            probe: probe.into(),
            ok: true,
            required,
            detail: detail.into(),
            fix: None,
        }
    }

    pub fn fail(
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
    pub fn failed_because(
        probe: impl Into<String>,
        required: bool,
        detail: impl Into<String>,
        cause: &Cause,
    ) -> Self {
        Self::fail(probe, required, detail, cause.fix())
    }
}

/// The kernel lockdown mode (`none`, `integrity`, `confidentiality`), mounting securityfs
/// first when it is not (a kernel locked down from its configuration says so only there).
pub fn lockdown_mode() -> Option<String> {
    let file = std::path::Path::new("/sys/kernel/security/lockdown");
    if !file.exists() {
        let target = std::ffi::CString::new("/sys/kernel/security").ok()?;
        let fstype = std::ffi::CString::new("securityfs").ok()?;
        // SAFETY: mount(2) with valid NUL-terminated strings and no data; failure is harmless.
        unsafe {
            libc::mount(
                fstype.as_ptr(),
                target.as_ptr(),
                fstype.as_ptr(),
                0,
                std::ptr::null(),
            );
        }
    }
    let text = std::fs::read_to_string(file).ok()?;
    let start = text.find('[')? + 1;
    let end = start + text[start..].find(']')?;
    Some(text[start..end].to_string())
}

/// A check that passes when `path` exists.
pub fn presence(probe: &str, required: bool, path: &Path, missing: &str, fix: &str) -> Check {
    if path.exists() {
        Check::pass(probe, required, format!("{} present", path.display()))
    } else {
        Check::fail(probe, required, missing, fix)
    }
}
