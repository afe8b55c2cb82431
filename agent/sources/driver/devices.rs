//! Which character devices are NVIDIA's, and their names: majors from /proc/devices (`195
//! nvidia`, `238 nvidia-uvm`, ...; some are assigned at load time, so never hard-coded), names
//! from /sys/dev/char/<major>:<minor>/uevent (`DEVNAME=nvidiactl`).

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
    cache: HashMap<(u32, u32), Option<String>>,
}

impl DeviceNames {
    /// Names from `<sys_dev_char>/<major>:<minor>/uevent`.
    pub fn new(sys_dev_char: impl Into<PathBuf>) -> Self {
        Self {
            sys_dev_char: sys_dev_char.into(),
            cache: HashMap::new(),
        }
    }

    /// The device's name (`nvidiactl`, `nvidia0`, `nvidia-uvm`), when sysfs knows it.
    pub fn name(&mut self, major: u32, minor: u32) -> Option<&str> {
        let dir = &self.sys_dev_char;
        self.cache
            .entry((major, minor))
            .or_insert_with(|| read_devname(&dir.join(format!("{major}:{minor}/uevent"))))
            .as_deref()
    }
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
    fn names_come_from_sysfs() {
        let mut names = DeviceNames::new("/sys/dev/char");
        assert_eq!(names.name(1, 3), Some("null"));
        assert_eq!(names.name(4095, 4095), None);
    }
}
