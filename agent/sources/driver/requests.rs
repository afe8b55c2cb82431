//! ioctl request numbers, decoded: the `_IOC` fields (direction, type, number, size) and, for
//! NVIDIA's devices, the name of the escape or UVM command (tables in `request_names`). UVM
//! commands are plain numbers, so they have no `_IOC` fields.

use super::request_names;

/// A decoded request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    /// `none`, `write`, `read`, `read_write`; None for a UVM command (not `_IOC`-encoded).
    pub dir: Option<&'static str>,
    /// Type byte (`F` = 0x46 for NVIDIA's control and GPU devices); None for a UVM command.
    pub kind: Option<u32>,
    /// Number: `_IOC_NR`, or a UVM command's whole value.
    pub nr: u32,
    /// Argument size in bytes; None for a UVM command.
    pub size: Option<u32>,
    /// The NVIDIA escape or UVM command, when known.
    pub name: Option<&'static str>,
}

/// NVIDIA's ioctl type byte.
const NV_IOCTL_MAGIC: u32 = b'F' as u32;

/// What kind of device file a request went to, by its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceClass {
    /// `nvidiactl` or `nvidiaN`: RM escapes, named by number whatever the type byte (the driver
    /// dispatches on `_IOC_NR` alone).
    Rm,
    /// `nvidia-uvm`, `nvidia-uvm-tools`: plain command numbers.
    Uvm,
    /// Anything else (or a device not named): an escape only with NVIDIA's type byte.
    Other,
}

impl DeviceClass {
    /// The class of the device file named `device` (e.g. `nvidiactl`, `nvidia3`).
    pub fn of(device: Option<&str>) -> Self {
        match device {
            Some(name) if name.starts_with("nvidia-uvm") => Self::Uvm,
            Some("nvidiactl") => Self::Rm,
            Some(name)
                if name
                    .strip_prefix("nvidia")
                    .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())) =>
            {
                Self::Rm
            }
            _ => Self::Other,
        }
    }

    /// Whether requests to this device are NVIDIA's and should all have a name.
    pub fn is_nvidia(self) -> bool {
        self != Self::Other
    }
}

/// Decodes `request` issued on `device` (the device file's name, e.g. `nvidiactl`).
pub fn decode(request: u32, device: Option<&str>) -> Request {
    let class = DeviceClass::of(device);
    if class == DeviceClass::Uvm {
        return Request {
            dir: None,
            kind: None,
            nr: request,
            size: None,
            name: request_names::uvm_command_name(request),
        };
    }
    let dir = match request >> 30 {
        0 => "none",
        1 => "write",
        2 => "read",
        _ => "read_write",
    };
    let kind = (request >> 8) & 0xff;
    let nr = request & 0xff;
    let size = (request >> 16) & 0x3fff;
    let name = if class == DeviceClass::Rm || kind == NV_IOCTL_MAGIC {
        request_names::escape_name(nr)
    } else {
        None
    };
    Request {
        dir: Some(dir),
        kind: Some(kind),
        nr,
        size: Some(size),
        name,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nvidia_escapes_are_named() {
        // _IOWR('F', 0x2a, 32 bytes): what libcuda sends for an RM control call.
        let control = decode(0xc020_462a, Some("nvidiactl"));
        assert_eq!(
            control,
            Request {
                dir: Some("read_write"),
                kind: Some(0x46),
                nr: 0x2a,
                size: Some(32),
                name: Some("NV_ESC_RM_CONTROL")
            }
        );
        assert_eq!(
            decode(0xc030_462b, Some("nvidia0")).name,
            Some("NV_ESC_RM_ALLOC")
        );
        assert_eq!(
            decode(0xc004_46c9, Some("nvidiactl")).name,
            Some("NV_ESC_REGISTER_FD")
        );
        // A UVM command is its whole value: no _IOC fields (0x30000001 would read as 12,288
        // bytes).
        assert_eq!(
            decode(0x3000_0001, Some("nvidia-uvm")),
            Request {
                dir: None,
                kind: None,
                nr: 0x3000_0001,
                size: None,
                name: Some("UVM_INITIALIZE")
            }
        );
        assert_eq!(
            decode(0x49, Some("nvidia-uvm-tools")).name,
            Some("UVM_CREATE_EXTERNAL_RANGE")
        );
        // Seen on driver 580: NUMA info on a GPU device, 560 bytes.
        let numa = decode(0xc230_46d7, Some("nvidia0"));
        assert_eq!(
            (numa.size, numa.name),
            (Some(560), Some("NV_ESC_NUMA_INFO"))
        );
        // The driver ignores the type byte on its devices, so a request with another one is
        // still named there, and only there.
        assert_eq!(
            decode(0xc020_002a, Some("nvidia7")).name,
            Some("NV_ESC_RM_CONTROL")
        );
        assert_eq!(decode(0xc020_002a, Some("nvidia-modeset")).name, None);
    }

    #[test]
    fn device_classes_follow_the_file_name() {
        for (name, class) in [
            (Some("nvidiactl"), DeviceClass::Rm),
            (Some("nvidia0"), DeviceClass::Rm),
            (Some("nvidia15"), DeviceClass::Rm),
            (Some("nvidia-uvm"), DeviceClass::Uvm),
            (Some("nvidia-uvm-tools"), DeviceClass::Uvm),
            (Some("nvidia"), DeviceClass::Other),
            (Some("nvidia-modeset"), DeviceClass::Other),
            (Some("nvidia-caps/nvidia-cap1"), DeviceClass::Other),
            (Some("nvidia0/../../etc"), DeviceClass::Other),
            (Some("pts/0"), DeviceClass::Other),
            (None, DeviceClass::Other),
        ] {
            assert_eq!(DeviceClass::of(name), class, "{name:?}");
        }
    }

    #[test]
    fn other_requests_are_decoded_but_not_named() {
        // TCGETS on a terminal: _IOR('T', 1, ...) in the old numbering is 0x5401 (no size).
        let tcgets = decode(0x5401, Some("pts/0"));
        assert_eq!(
            (tcgets.dir, tcgets.kind, tcgets.nr, tcgets.size),
            (Some("none"), Some(0x54), 1, Some(0))
        );
        assert_eq!(tcgets.name, None);
        // The same number on the UVM device is not an escape.
        assert_eq!(decode(0xc020_462a, Some("nvidia-uvm")).name, None);
    }
}
