//! The names of NVIDIA's ioctl requests, from the open kernel modules' headers
//! (NVIDIA/open-gpu-kernel-modules; checked against what a PyTorch process sends on driver 580,
//! docs/gpu-verification.md). Two families:
//! - escapes of the control device and the GPU devices (`/dev/nvidiactl`, `/dev/nvidiaN`),
//!   `_IOC`-encoded with type `'F'`; the driver dispatches on the number alone (`_IOC_NR`);
//! - commands of the UVM devices (`/dev/nvidia-uvm`, `/dev/nvidia-uvm-tools`), plain numbers
//!   (`UVM_IOCTL_BASE(i)` is `i` on Linux), matched whole.

/// RM escapes (`nv_escape.h`, OS-independent) and the Linux escapes from `NV_IOCTL_BASE` = 200
/// (`nv-ioctl-numbers.h`, `nv-ioctl-numa.h`), by `_IOC_NR`.
const NV_ESCAPES: &[(u32, &str)] = &[
    (0x27, "NV_ESC_RM_ALLOC_MEMORY"),
    (0x28, "NV_ESC_RM_ALLOC_OBJECT"),
    (0x29, "NV_ESC_RM_FREE"),
    (0x2a, "NV_ESC_RM_CONTROL"),
    (0x2b, "NV_ESC_RM_ALLOC"),
    (0x32, "NV_ESC_RM_CONFIG_GET"),
    (0x33, "NV_ESC_RM_CONFIG_SET"),
    (0x34, "NV_ESC_RM_DUP_OBJECT"),
    (0x35, "NV_ESC_RM_SHARE"),
    (0x37, "NV_ESC_RM_CONFIG_GET_EX"),
    (0x38, "NV_ESC_RM_CONFIG_SET_EX"),
    (0x39, "NV_ESC_RM_I2C_ACCESS"),
    (0x41, "NV_ESC_RM_IDLE_CHANNELS"),
    (0x4a, "NV_ESC_RM_VID_HEAP_CONTROL"),
    (0x4d, "NV_ESC_RM_ACCESS_REGISTRY"),
    (0x4e, "NV_ESC_RM_MAP_MEMORY"),
    (0x4f, "NV_ESC_RM_UNMAP_MEMORY"),
    (0x52, "NV_ESC_RM_GET_EVENT_DATA"),
    (0x54, "NV_ESC_RM_ALLOC_CONTEXT_DMA2"),
    (0x56, "NV_ESC_RM_ADD_VBLANK_CALLBACK"),
    (0x57, "NV_ESC_RM_MAP_MEMORY_DMA"),
    (0x58, "NV_ESC_RM_UNMAP_MEMORY_DMA"),
    (0x59, "NV_ESC_RM_BIND_CONTEXT_DMA"),
    (0x5c, "NV_ESC_RM_EXPORT_OBJECT_TO_FD"),
    (0x5d, "NV_ESC_RM_IMPORT_OBJECT_FROM_FD"),
    (0x5e, "NV_ESC_RM_UPDATE_DEVICE_MAPPING_INFO"),
    (0x5f, "NV_ESC_RM_LOCKLESS_DIAGNOSTIC"),
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
    (215, "NV_ESC_NUMA_INFO"),
    (216, "NV_ESC_SET_NUMA_STATUS"),
    (217, "NV_ESC_EXPORT_TO_DMABUF_FD"),
    (218, "NV_ESC_WAIT_OPEN_COMPLETE"),
];

/// UVM commands (`uvm_ioctl.h`, `uvm_linux_ioctl.h`), whole request values. 8, 32, 36, 48-50
/// and 52 are unassigned; 200 and up are the driver's built-in tests.
const UVM_COMMANDS: &[(u32, &str)] = &[
    (1, "UVM_RESERVE_VA"),
    (2, "UVM_RELEASE_VA"),
    (3, "UVM_REGION_COMMIT"),
    (4, "UVM_REGION_DECOMMIT"),
    (5, "UVM_REGION_SET_STREAM"),
    (6, "UVM_SET_STREAM_RUNNING"),
    (7, "UVM_SET_STREAM_STOPPED"),
    (9, "UVM_RUN_TEST"),
    (10, "UVM_ADD_SESSION"),
    (11, "UVM_REMOVE_SESSION"),
    (12, "UVM_ENABLE_COUNTERS"),
    (13, "UVM_MAP_COUNTER"),
    (14, "UVM_CREATE_EVENT_QUEUE"),
    (15, "UVM_REMOVE_EVENT_QUEUE"),
    (16, "UVM_MAP_EVENT_QUEUE"),
    (17, "UVM_EVENT_CTRL"),
    (18, "UVM_REGISTER_MPS_SERVER"),
    (19, "UVM_REGISTER_MPS_CLIENT"),
    (20, "UVM_GET_GPU_UUID_TABLE"),
    (21, "UVM_REGION_SET_BACKING"),
    (22, "UVM_REGION_UNSET_BACKING"),
    (23, "UVM_CREATE_RANGE_GROUP"),
    (24, "UVM_DESTROY_RANGE_GROUP"),
    (25, "UVM_REGISTER_GPU_VASPACE"),
    (26, "UVM_UNREGISTER_GPU_VASPACE"),
    (27, "UVM_REGISTER_CHANNEL"),
    (28, "UVM_UNREGISTER_CHANNEL"),
    (29, "UVM_ENABLE_PEER_ACCESS"),
    (30, "UVM_DISABLE_PEER_ACCESS"),
    (31, "UVM_SET_RANGE_GROUP"),
    (33, "UVM_MAP_EXTERNAL_ALLOCATION"),
    (34, "UVM_FREE"),
    (35, "UVM_MEM_MAP"),
    (37, "UVM_REGISTER_GPU"),
    (38, "UVM_UNREGISTER_GPU"),
    (39, "UVM_PAGEABLE_MEM_ACCESS"),
    (40, "UVM_PREVENT_MIGRATION_RANGE_GROUPS"),
    (41, "UVM_ALLOW_MIGRATION_RANGE_GROUPS"),
    (42, "UVM_SET_PREFERRED_LOCATION"),
    (43, "UVM_UNSET_PREFERRED_LOCATION"),
    (44, "UVM_ENABLE_READ_DUPLICATION"),
    (45, "UVM_DISABLE_READ_DUPLICATION"),
    (46, "UVM_SET_ACCESSED_BY"),
    (47, "UVM_UNSET_ACCESSED_BY"),
    (51, "UVM_MIGRATE"),
    (53, "UVM_MIGRATE_RANGE_GROUP"),
    (54, "UVM_ENABLE_SYSTEM_WIDE_ATOMICS"),
    (55, "UVM_DISABLE_SYSTEM_WIDE_ATOMICS"),
    (56, "UVM_TOOLS_INIT_EVENT_TRACKER"),
    (57, "UVM_TOOLS_SET_NOTIFICATION_THRESHOLD"),
    (58, "UVM_TOOLS_EVENT_QUEUE_ENABLE_EVENTS"),
    (59, "UVM_TOOLS_EVENT_QUEUE_DISABLE_EVENTS"),
    (60, "UVM_TOOLS_ENABLE_COUNTERS"),
    (61, "UVM_TOOLS_DISABLE_COUNTERS"),
    (62, "UVM_TOOLS_READ_PROCESS_MEMORY"),
    (63, "UVM_TOOLS_WRITE_PROCESS_MEMORY"),
    (64, "UVM_TOOLS_GET_PROCESSOR_UUID_TABLE"),
    (65, "UVM_MAP_DYNAMIC_PARALLELISM_REGION"),
    (66, "UVM_UNMAP_EXTERNAL"),
    (67, "UVM_TOOLS_FLUSH_EVENTS"),
    (68, "UVM_ALLOC_SEMAPHORE_POOL"),
    (69, "UVM_CLEAN_UP_ZOMBIE_RESOURCES"),
    (70, "UVM_PAGEABLE_MEM_ACCESS_ON_GPU"),
    (71, "UVM_POPULATE_PAGEABLE"),
    (72, "UVM_VALIDATE_VA_RANGE"),
    (73, "UVM_CREATE_EXTERNAL_RANGE"),
    (74, "UVM_MAP_EXTERNAL_SPARSE"),
    (75, "UVM_MM_INITIALIZE"),
    (76, "UVM_TOOLS_INIT_EVENT_TRACKER_V2"),
    (77, "UVM_TOOLS_GET_PROCESSOR_UUID_TABLE_V2"),
    (78, "UVM_ALLOC_DEVICE_P2P"),
    (79, "UVM_CLEAR_ALL_ACCESS_COUNTERS"),
    (2047, "UVM_IS_8_SUPPORTED"),
    (0x3000_0001, "UVM_INITIALIZE"),
    (0x3000_0002, "UVM_DEINITIALIZE"),
];

fn find(table: &[(u32, &'static str)], code: u32) -> Option<&'static str> {
    table
        .binary_search_by_key(&code, |(known, _)| *known)
        .ok()
        .map(|index| table[index].1)
}

/// The escape numbered `nr` (`_IOC_NR` of a request on the control or a GPU device).
pub fn escape_name(nr: u32) -> Option<&'static str> {
    find(NV_ESCAPES, nr)
}

/// The UVM command `request` (the whole value).
pub fn uvm_command_name(request: u32) -> Option<&'static str> {
    find(UVM_COMMANDS, request)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lookups are binary searches: the tables must be sorted and free of repeats.
    #[test]
    fn tables_are_sorted_and_unique() {
        for table in [NV_ESCAPES, UVM_COMMANDS] {
            assert!(table.windows(2).all(|w| w[0].0 < w[1].0), "{table:?}");
        }
        assert_eq!((NV_ESCAPES.len(), UVM_COMMANDS.len()), (41, 75));
    }

    /// Every request a PyTorch process sent on driver 580 (H100, 1,202 ioctls) has a name.
    #[test]
    fn what_pytorch_sends_on_driver_580_is_named() {
        for (nr, name) in [
            (0x2a, "NV_ESC_RM_CONTROL"),
            (0x5e, "NV_ESC_RM_UPDATE_DEVICE_MAPPING_INFO"),
            (215, "NV_ESC_NUMA_INFO"),
            (218, "NV_ESC_WAIT_OPEN_COMPLETE"),
        ] {
            assert_eq!(escape_name(nr), Some(name));
        }
        for (command, name) in [
            (0x17, "UVM_CREATE_RANGE_GROUP"),
            (0x21, "UVM_MAP_EXTERNAL_ALLOCATION"),
            (0x49, "UVM_CREATE_EXTERNAL_RANGE"),
            (0x22, "UVM_FREE"),
            (0x1b, "UVM_REGISTER_CHANNEL"),
            (0x4b, "UVM_MM_INITIALIZE"),
            (0x3000_0001, "UVM_INITIALIZE"),
        ] {
            assert_eq!(uvm_command_name(command), Some(name));
        }
        // Unassigned numbers, the built-in tests and the limits of the type have no name.
        for code in [0, 8, 32, 36, 48, 52, 80, 200, 2046, u32::MAX] {
            assert_eq!(uvm_command_name(code), None, "{code}");
        }
        for nr in [0, 0x26, 0x60, 199, 202, 219, 255] {
            assert_eq!(escape_name(nr), None, "{nr}");
        }
    }
}
