//! NVIDIA ioctl requests that have no name in `request_names`: each code is logged once when
//! first seen, so a newer driver's escapes and UVM commands show up, and counted per code for
//! the final log line. At most `MAX_CODES` codes are kept; the rest are counted together.

use std::collections::BTreeMap;

use super::requests::DeviceClass;

/// Most distinct codes remembered (a driver adds a handful; a flood of distinct codes is noise).
const MAX_CODES: usize = 64;

/// Unnamed requests seen so far, per device class and code.
#[derive(Debug, Default)]
pub struct UnnamedRequests {
    counts: BTreeMap<(&'static str, u32), u64>,
    /// Requests of codes beyond `MAX_CODES`.
    overflow: u64,
}

impl UnnamedRequests {
    /// Counts an unnamed request of an NVIDIA device; returns whether its code is new (then
    /// logged). Requests to other devices are not NVIDIA's and are not counted.
    pub fn record(&mut self, class: DeviceClass, request: u32) -> bool {
        let class = match class {
            DeviceClass::Rm => "rm",
            DeviceClass::Uvm => "uvm",
            DeviceClass::Other => return false,
        };
        if let Some(count) = self.counts.get_mut(&(class, request)) {
            *count += 1;
            return false;
        }
        if self.counts.len() >= MAX_CODES {
            self.overflow += 1;
            return false;
        }
        self.counts.insert((class, request), 1);
        tracing::warn!(
            device = class,
            request = %format!("{request:#010x}"),
            "NVIDIA ioctl request with no name in gpuship's tables (a newer driver?); counted in gpuship_probe_unnamed_requests_total"
        );
        true
    }

    /// `rm 0x00000060=3 uvm 0x00000050=1 ...`, then the overflow, for the final log line.
    pub fn summary(&self) -> String {
        let mut text: Vec<String> = self
            .counts
            .iter()
            .map(|((class, request), count)| format!("{class} {request:#010x}={count}"))
            .collect();
        if self.overflow > 0 {
            text.push(format!("more codes={}", self.overflow));
        }
        text.join(" ")
    }

    /// Whether any was seen.
    pub fn is_empty(&self) -> bool {
        self.counts.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_code_is_new_once_and_counted_per_device_class() {
        let mut unnamed = UnnamedRequests::default();
        assert!(unnamed.record(DeviceClass::Uvm, 80));
        assert!(!unnamed.record(DeviceClass::Uvm, 80));
        assert!(unnamed.record(DeviceClass::Rm, 80));
        assert!(unnamed.record(DeviceClass::Rm, u32::MAX));
        // Not an NVIDIA device: not NVIDIA's request to name.
        assert!(!unnamed.record(DeviceClass::Other, 81));
        assert_eq!(
            unnamed.summary(),
            "rm 0x00000050=1 rm 0xffffffff=1 uvm 0x00000050=2"
        );
    }

    #[test]
    fn codes_beyond_the_bound_are_counted_together() {
        let mut unnamed = UnnamedRequests::default();
        for code in 0..(MAX_CODES as u32 + 10) {
            unnamed.record(DeviceClass::Uvm, code);
        }
        assert!(!unnamed.record(DeviceClass::Uvm, 0));
        assert_eq!(unnamed.counts.len(), MAX_CODES);
        assert!(
            unnamed.summary().ends_with("more codes=10"),
            "{}",
            unnamed.summary()
        );
    }
}
