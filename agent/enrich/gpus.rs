//! GPU identity by PCI bus id, from the driver's `/proc/driver/nvidia/gpus/<bus id>/information`
//! files (`Model:`, `GPU UUID:`, `Bus Location:`). Hosts without the driver simply have none.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use gpuship_sinks::schema::GpuIdentity;

/// The GPUs this host's driver describes.
#[derive(Debug, Default, Clone)]
pub struct GpuDirectory {
    by_bus_id: HashMap<String, Arc<GpuIdentity>>,
}

impl GpuDirectory {
    /// Reads every `<dir>/<bus id>/information`; a missing `dir` gives an empty directory.
    pub fn load(dir: &Path) -> Self {
        let Ok(entries) = std::fs::read_dir(dir) else {
            tracing::debug!(dir = %dir.display(), "no NVIDIA GPU information; GPU columns stay empty");
            return Self::default();
        };
        let mut found: Vec<(String, String, String, Option<u32>)> = Vec::new();
        for entry in entries.flatten() {
            let dir_name = entry.file_name().to_string_lossy().to_lowercase();
            let Ok(text) = std::fs::read_to_string(entry.path().join("information")) else {
                continue;
            };
            let field = |key: &str| {
                text.lines()
                    .find_map(|line| line.strip_prefix(key).map(|v| v.trim().to_string()))
                    .filter(|v| !v.is_empty())
            };
            let bus_id = field("Bus Location:")
                .map(|b| b.to_lowercase())
                .unwrap_or(dir_name);
            let Some(uuid) = field("GPU UUID:") else {
                continue;
            };
            let model = field("Model:").unwrap_or_default();
            let minor = field("Device Minor:").and_then(|m| m.parse::<u32>().ok());
            found.push((bus_id, uuid, model, minor));
        }
        // nvidia-smi numbers GPUs in PCI bus order by default.
        found.sort();
        let by_bus_id = found
            .into_iter()
            .enumerate()
            .map(|(index, (bus_id, uuid, model, minor))| {
                (
                    bus_id,
                    Arc::new(GpuIdentity {
                        uuid,
                        model,
                        index: index as i32,
                        minor,
                    }),
                )
            })
            .collect::<HashMap<_, _>>();
        tracing::info!(gpus = by_bus_id.len(), dir = %dir.display(), "GPU directory loaded");
        Self { by_bus_id }
    }

    /// The GPU at a normalized bus id (`dddd:bb:dd.f`, lowercase).
    pub fn lookup(&self, bus_id: &str) -> Option<Arc<GpuIdentity>> {
        self.by_bus_id.get(bus_id).cloned()
    }

    /// The GPU with this UUID (`GPU-...`, any case), with its bus id.
    pub fn lookup_uuid(&self, uuid: &str) -> Option<(String, Arc<GpuIdentity>)> {
        self.by_bus_id
            .iter()
            .find(|(_, gpu)| gpu.uuid.eq_ignore_ascii_case(uuid))
            .map(|(bus_id, gpu)| (bus_id.clone(), Arc::clone(gpu)))
    }

    /// The node's GPU, with its bus id, when it has exactly one.
    pub fn only(&self) -> Option<(&str, &Arc<GpuIdentity>)> {
        let mut gpus = self.by_bus_id.iter();
        let only = gpus.next()?;
        gpus.next().is_none().then_some((only.0.as_str(), only.1))
    }

    /// Number of GPUs known.
    pub fn len(&self) -> usize {
        self.by_bus_id.len()
    }

    /// True when no GPU is known.
    pub fn is_empty(&self) -> bool {
        self.by_bus_id.is_empty()
    }
}

/// The driver version from `/proc/driver/nvidia/version` (`NVRM version: ... 580.159.04 ...`),
/// or from a GPU's `GPU Firmware:` line.
pub fn driver_version(nvidia_proc_dir: &std::path::Path) -> Option<String> {
    let version_file = nvidia_proc_dir.parent()?.join("version");
    if let Ok(text) = std::fs::read_to_string(version_file) {
        let line = text.lines().find(|l| l.starts_with("NVRM version:"))?;
        return line
            .split_whitespace()
            .find(|w| w.chars().next().is_some_and(|c| c.is_ascii_digit()) && w.contains('.'))
            .map(str::to_string);
    }
    std::fs::read_dir(nvidia_proc_dir)
        .ok()?
        .filter_map(Result::ok)
        .find_map(|gpu| {
            let text = std::fs::read_to_string(gpu.path().join("information")).ok()?;
            text.lines()
                .find_map(|l| l.strip_prefix("GPU Firmware:"))
                .map(|v| v.trim().to_string())
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_gpu(root: &Path, bus: &str, uuid: &str, model: &str) {
        let dir = root.join(bus);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("information"),
            format!("Model: \t\t {model}\nIRQ:   \t\t 35\nGPU UUID: \t {uuid}\nVideo BIOS: \t ??.??.??.??.??\nBus Location: \t {bus}\nDevice Minor: \t 0\nGPU Firmware: \t 580.159.04\n"),
        )
        .unwrap();
    }

    #[test]
    fn reads_information_files_and_numbers_gpus_in_bus_order() {
        let root = tempfile::tempdir().unwrap();
        write_gpu(
            root.path(),
            "0000:3B:00.0",
            "GPU-bbbb",
            "NVIDIA H100 80GB HBM3",
        );
        write_gpu(root.path(), "0000:00:06.0", "GPU-aaaa", "NVIDIA H200");
        std::fs::create_dir_all(root.path().join("0000:99:00.0")).unwrap(); // no information file
        let gpus = GpuDirectory::load(root.path());
        assert_eq!(gpus.len(), 2);
        let first = gpus.lookup("0000:00:06.0").unwrap();
        assert_eq!(
            (first.uuid.as_str(), first.model.as_str(), first.index),
            ("GPU-aaaa", "NVIDIA H200", 0)
        );
        let second = gpus.lookup("0000:3b:00.0").unwrap();
        assert_eq!((second.uuid.as_str(), second.index), ("GPU-bbbb", 1));
        assert!(gpus.lookup("0000:99:00.0").is_none());
    }

    #[test]
    fn missing_directory_is_empty() {
        assert!(GpuDirectory::load(Path::new("/nonexistent/gpus")).is_empty());
    }

    #[test]
    fn driver_version_from_the_version_file_or_a_gpu() {
        let root = tempfile::tempdir().unwrap();
        let gpus = root.path().join("gpus");
        std::fs::create_dir_all(gpus.join("0000:00:06.0")).unwrap();
        std::fs::write(
            gpus.join("0000:00:06.0/information"),
            "Model: \t H100\nGPU Firmware: \t 580.159.04\n",
        )
        .unwrap();
        assert_eq!(driver_version(&gpus).as_deref(), Some("580.159.04"));
        std::fs::write(
            root.path().join("version"),
            "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  (dvs-builder@U16-I3-A03-5-1)  Thu Sep  4 00:00:00 UTC 2025\nGCC version:  gcc version 13.3.0\n",
        )
        .unwrap();
        assert_eq!(driver_version(&gpus).as_deref(), Some("580.159.04"));
        assert_eq!(
            driver_version(std::path::Path::new("/nonexistent/gpus")),
            None
        );
    }
}
