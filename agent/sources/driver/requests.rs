//! ioctl request numbers, decoded: the `_IOC` fields (direction, type, number, size) and, for
//! NVIDIA's control and UVM devices, the name of the escape or command.

/// A decoded request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    /// `none`, `write`, `read`, `read_write`.
    pub dir: &'static str,
    /// Type byte (`F` = 0x46 for the NVIDIA control device).
    pub kind: u32,
    /// Number.
    pub nr: u32,
    /// Argument size in bytes.
    pub size: u32,
    /// The NVIDIA escape or UVM command, when known.
    pub name: Option<&'static str>,
}

/// NVIDIA's ioctl type byte.
const NV_IOCTL_MAGIC: u32 = b'F' as u32;

/// Escapes of the NVIDIA control device (nv_escape.h, nv-ioctl-numbers.h).
const NV_ESCAPES: &[(u32, &str)] = &[
    (0x27, "NV_ESC_RM_ALLOC_MEMORY"),
    (0x28, "NV_ESC_RM_ALLOC_OBJECT"),
    (0x29, "NV_ESC_RM_FREE"),
    (0x2a, "NV_ESC_RM_CONTROL"),
    (0x2b, "NV_ESC_RM_ALLOC"),
    (0x34, "NV_ESC_RM_DUP_OBJECT"),
    (0x35, "NV_ESC_RM_SHARE"),
    (0x4e, "NV_ESC_RM_MAP_MEMORY"),
    (0x4f, "NV_ESC_RM_UNMAP_MEMORY"),
    (0x52, "NV_ESC_RM_GET_EVENT_DATA"),
    (0x57, "NV_ESC_RM_MAP_MEMORY_DMA"),
    (0x58, "NV_ESC_RM_UNMAP_MEMORY_DMA"),
    (200, "NV_ESC_CARD_INFO"),
    (201, "NV_ESC_REGISTER_FD"),
    (206, "NV_ESC_ALLOC_OS_EVENT"),
    (207, "NV_ESC_FREE_OS_EVENT"),
    (209, "NV_ESC_STATUS_CODE"),
    (210, "NV_ESC_CHECK_VERSION_STR"),
    (211, "NV_ESC_IOCTL_XFER_CMD"),
    (212, "NV_ESC_ATTACH_GPUS_TO_FD"),
    (213, "NV_ESC_QUERY_DEVICE_INTR"),
    (214, "NV_ESC_SYS_PARAMS"),
    (217, "NV_ESC_EXPORT_TO_DMABUF_FD"),
    (218, "NV_ESC_WAIT_OPEN_COMPLETE"),
];

/// UVM commands are plain numbers, not `_IOC` encodings.
const UVM_COMMANDS: &[(u32, &str)] = &[
    (0x3000_0001, "UVM_INITIALIZE"),
    (0x3000_0002, "UVM_DEINITIALIZE"),
];

/// Decodes `request` issued on `device` (the device file's name, e.g. `nvidiactl`).
pub fn decode(request: u32, device: Option<&str>) -> Request {
    let dir = match request >> 30 {
        0 => "none",
        1 => "write",
        2 => "read",
        _ => "read_write",
    };
    let kind = (request >> 8) & 0xff;
    let nr = request & 0xff;
    let size = (request >> 16) & 0x3fff;
    let name = if device.is_some_and(|d| d.starts_with("nvidia-uvm")) {
        UVM_COMMANDS
            .iter()
            .find(|(code, _)| *code == request)
            .map(|(_, name)| *name)
    } else if kind == NV_IOCTL_MAGIC {
        NV_ESCAPES
            .iter()
            .find(|(code, _)| *code == nr)
            .map(|(_, name)| *name)
    } else {
        None
    };
    Request {
        dir,
        kind,
        nr,
        size,
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
                dir: "read_write",
                kind: 0x46,
                nr: 0x2a,
                size: 32,
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
        assert_eq!(
            decode(0x3000_0001, Some("nvidia-uvm")).name,
            Some("UVM_INITIALIZE")
        );
    }

    #[test]
    fn other_requests_are_decoded_but_not_named() {
        // TCGETS on a terminal: _IOR('T', 1, ...) in the old numbering is 0x5401 (no size).
        let tcgets = decode(0x5401, Some("pts/0"));
        assert_eq!(
            (tcgets.dir, tcgets.kind, tcgets.nr, tcgets.size),
            ("none", 0x54, 1, 0)
        );
        assert_eq!(tcgets.name, None);
        // The same number on the UVM device is not an escape.
        assert_eq!(decode(0xc020_462a, Some("nvidia-uvm")).name, None);
    }
}
