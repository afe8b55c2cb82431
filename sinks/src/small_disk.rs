//! A small tmpfs for tests of full disks: mounted for the test, unmounted when dropped.

use std::path::Path;

/// A mounted tmpfs of a given size.
pub(crate) struct SmallDisk(tempfile::TempDir);

impl SmallDisk {
    /// Mounts a tmpfs of `size` (as `mount -o size=` takes it); None where mounting is not
    /// allowed (tests run as root in CI).
    pub(crate) fn mount(size: &str) -> Option<SmallDisk> {
        let dir = tempfile::tempdir().unwrap();
        let status = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .status()
            .ok()?;
        status.success().then_some(SmallDisk(dir))
    }

    /// Its mount point.
    pub(crate) fn path(&self) -> &Path {
        self.0.path()
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg(self.0.path())
            .status();
    }
}
