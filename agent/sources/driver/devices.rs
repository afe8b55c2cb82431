//! Which character devices are NVIDIA's, and their names: majors from /proc/devices (`195
//! nvidia`, `238 nvidia-uvm`, ...; some are assigned at load time, so never hard-coded), names
//! from /sys/dev/char/<major>:<minor>/uevent (`DEVNAME=...`), or, since the NVIDIA driver
//! registers no sysfs class devices (nvidia-modprobe makes its nodes), from the device nodes
//! under /dev themselves.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Majors of the character devices whose name starts with `nvidia` in a /proc/devices text.
pub fn nvidia_majors(proc_devices: &str) -> Vec<u32> {
    let mut in_char = false;
    let mut majors = Vec::new();
    for line in proc_devices.lines() {
        let line = line.trim();
        if line.ends_with("devices:") {
            in_char = line.starts_with("Character");
            continue;
        }
        if !in_char {
            continue;
        }
        if let Some((major, name)) = line.split_once(char::is_whitespace) {
            if name.trim().starts_with("nvidia") {
                if let Ok(major) = major.parse() {
                    if !majors.contains(&major) {
                        majors.push(major);
                    }
                }
            }
        }
    }
    majors
}

/// Device names by number, read once per device.
#[derive(Debug)]
pub struct DeviceNames {
    sys_dev_char: PathBuf,
    dev: PathBuf,
    cache: HashMap<(u32, u32), Option<String>>,
    /// Character device nodes under `dev` by number, read on the first sysfs miss.
    nodes: Option<HashMap<(u32, u32), String>>,
}

impl DeviceNames {
    /// Names from `<sys_dev_char>/<major>:<minor>/uevent`, else from the nodes under `dev`.
    pub fn new(sys_dev_char: impl Into<PathBuf>, dev: impl Into<PathBuf>) -> Self {
        Self {
            sys_dev_char: sys_dev_char.into(),
            dev: dev.into(),
            cache: HashMap::new(),
            nodes: None,
        }
    }

    /// The device's name (`nvidiactl`, `nvidia0`, `nvidia-uvm`, `nvidia-caps/nvidia-cap1`).
    pub fn name(&mut self, major: u32, minor: u32) -> Option<&str> {
        if !self.cache.contains_key(&(major, minor)) {
            let mut name = read_devname(&self.sys_dev_char.join(format!("{major}:{minor}/uevent")));
            if name.is_none() {
                let dev = &self.dev;
                name = self
                    .nodes
                    .get_or_insert_with(|| device_nodes(dev))
                    .get(&(major, minor))
                    .cloned();
            }
            self.cache.insert((major, minor), name);
        }
        self.cache.get(&(major, minor)).and_then(|n| n.as_deref())
    }
}

/// Character device nodes directly under `dev` and one level below (`nvidia-caps/`).
fn device_nodes(dev: &Path) -> HashMap<(u32, u32), String> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let mut nodes = HashMap::new();
    let mut dirs = vec![(dev.to_path_buf(), String::new())];
    let mut depth = 0;
    while let Some((dir, prefix)) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.filter_map(Result::ok) {
            let Ok(meta) = entry.path().symlink_metadata() else {
                continue;
            };
            let name = format!("{prefix}{}", entry.file_name().to_string_lossy());
            if meta.file_type().is_char_device() {
                let rdev = meta.rdev();
                let (major, minor) = (libc::major(rdev), libc::minor(rdev));
                nodes.entry((major, minor)).or_insert(name);
            } else if meta.is_dir() && depth == 0 && name.starts_with("nvidia") {
                dirs.push((entry.path(), format!("{name}/")));
            }
        }
        depth += 1;
    }
    nodes
}

fn read_devname(uevent: &Path) -> Option<String> {
    std::fs::read_to_string(uevent)
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("DEVNAME="))
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn majors_come_from_the_character_section() {
        let text = "Character devices:\n  1 mem\n  4 /dev/vc/0\n195 nvidia-frontend\n195 nvidia\n238 nvidia-uvm\n241 nvidia-caps\n\nBlock devices:\n  8 sd\n 250 nvidia-fake-block\n";
        assert_eq!(nvidia_majors(text), [195, 238, 241]);
        assert!(nvidia_majors("Character devices:\n  1 mem\n").is_empty());
    }

    #[test]
    fn names_come_from_sysfs_or_the_device_nodes() {
        let mut names = DeviceNames::new("/sys/dev/char", "/dev");
        assert_eq!(names.name(1, 3), Some("null"));
        assert_eq!(names.name(4095, 4095), None);
        // Without sysfs entries (as for NVIDIA's nodes), the node under /dev names it.
        let mut from_dev = DeviceNames::new("/nonexistent", "/dev");
        assert_eq!(from_dev.name(1, 5), Some("zero"));
    }
}
