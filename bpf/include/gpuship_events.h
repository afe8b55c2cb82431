/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The only contract between the BPF programs and the Rust agent: the layout of every ring-buffer
 * record, the attach-cookie encoding and the counter slots. Rust reads these through the
 * generated skeleton types (`types::xid_event`, `types::cuda_event`), never through a
 * hand-copied struct, so a change here is a change in one place.
 *
 * Rules: fixed-width types only, explicit padding, new fields go at the end, and
 * GPUSHIP_ABI_VERSION is bumped whenever a layout changes.
 */
#ifndef GPUSHIP_EVENTS_H
#define GPUSHIP_EVENTS_H

#define GPUSHIP_ABI_VERSION 2

#define GPUSHIP_COMM_LEN 16
/* PCI names are "dddd:bb:dd.f" (12 chars); room for longer names some drivers print. */
#define GPUSHIP_XID_DEV_LEN 32
/* The driver's XID messages are well under 512 bytes; longer ones are cut, never overread. */
#define GPUSHIP_XID_MSG_LEN 512
/* Kernel names as cuLibraryGetKernel / cuModuleGetFunction take them: PyTorch's longest on the
 * H100 was 446 bytes, templated CUTLASS names reach a few KiB; a longer one is cut here and
 * completed by the agent from the process's memory. These records are rare (one per lookup). */
#define GPUSHIP_KERNEL_NAME_LEN 4096

/* First field of every record: lets the agent reject a record from the wrong ring or version. */
enum gpuship_record_kind {
	GPUSHIP_RECORD_XID = 0x58494401,  /* "XID" + ABI version 1 */
	GPUSHIP_RECORD_CUDA = 0x43554402, /* "CUD" + ABI version 2 */
	GPUSHIP_RECORD_CUDA_NAMED = 0x434e4d02, /* "CNM" + ABI version 2: a cuda_named_event */
	GPUSHIP_RECORD_DRIVER = 0x44525601, /* "DRV" + ABI version 1 */
};

/* Slots of each program's per-CPU counter array. */
enum gpuship_ring_stat {
	GPUSHIP_STAT_SUBMITTED = 0,      /* records committed to the ring */
	GPUSHIP_STAT_RESERVE_FAILED = 1, /* ring full: event lost in the kernel */
	GPUSHIP_STAT_UNMATCHED_RETURN = 2, /* uretprobe without its entry (probe attached mid-call) */
	GPUSHIP_STAT_INFLIGHT_FULL = 3,    /* entry not stored: in-flight table full; call not recorded */
	GPUSHIP_STAT_AGGREGATED = 4,       /* calls added to the per-interval statistics (call_stats) */
	GPUSHIP_STAT_STATS_FULL = 5,       /* calls not added: call_stats full; counted, not recorded */
	GPUSHIP_STAT_COUNT = 6,
};

/* One XID from the nvidia:nvidia_dev_xid tracepoint. */
struct xid_event {
	__u32 record_kind;   /* GPUSHIP_RECORD_XID */
	__u32 error_code;    /* the XID number */
	__u64 boot_time_ns;  /* bpf_ktime_get_boot_ns() when the tracepoint fired */
	__u32 pid;           /* thread group of the reporting context (often a driver IRQ thread) */
	__u32 tid;
	__u16 dev_len;       /* bytes of dev[] used, without the NUL */
	__u16 msg_len;       /* bytes of msg[] used, without the NUL */
	__u32 flags;         /* GPUSHIP_XID_* bits */
	char comm[GPUSHIP_COMM_LEN];
	char dev[GPUSHIP_XID_DEV_LEN];
	char msg[GPUSHIP_XID_MSG_LEN];
};

/* xid_event.flags */
enum gpuship_xid_flag {
	GPUSHIP_XID_MSG_TRUNCATED = 1 << 0,
	GPUSHIP_XID_DEV_TRUNCATED = 1 << 1,
};

/* One completed CUDA driver API call, emitted at its return. */
struct cuda_event {
	__u32 record_kind;      /* GPUSHIP_RECORD_CUDA */
	__u32 function_id;      /* index into the agent's probe table (from the attach cookie) */
	__u64 start_boot_ns;    /* bpf_ktime_get_boot_ns() at entry */
	__u64 duration_ns;      /* return time - entry time */
	__u32 pid;
	__u32 tid;
	__u32 result;           /* CUresult returned */
	__u32 valid;            /* GPUSHIP_ARG_* bits: which argument fields below were decoded */
	__u64 bytes;
	__u64 device_ptr;
	__u64 stream;
	/* A launch's geometry; for a call that returns a device's UUID (cuDeviceGetUuid), its 16
	 * bytes in grid[0..2] and block[0] instead (GPUSHIP_ARG_UUID). */
	__u32 grid[3];
	__u32 block[3];
	__u32 shared_mem_bytes;
	__u32 _pad;
	char comm[GPUSHIP_COMM_LEN];
	/* ABI version 2: the CUDA object the call makes or uses (a launch's CUfunction or
	 * CUkernel; the CUkernel, CUfunction, CUlibrary or CUmodule a getter or a load makes; the
	 * one an unload drops), and the object it came from (the library, module or kernel). */
	__u64 handle;
	__u64 parent_handle;
};

/* A call that takes a name (cuLibraryGetKernel, cuModuleGetFunction): its cuda_event, then the
 * name read from the caller's memory at return. */
struct cuda_named_event {
	struct cuda_event call;     /* call.record_kind = GPUSHIP_RECORD_CUDA_NAMED */
	__u64 name_ptr;             /* the name's user address, for completing a cut name */
	__u32 name_len;             /* bytes of name[] used, without the NUL; 0 when unreadable */
	__u32 name_flags;           /* GPUSHIP_NAME_* bits */
	char name[GPUSHIP_KERNEL_NAME_LEN];
};

enum gpuship_name_flag {
	GPUSHIP_NAME_TRUNCATED = 1 << 0, /* the name did not fit name[] */
	GPUSHIP_NAME_UNREADABLE = 1 << 1, /* the read from the caller's memory failed */
};

/* cuda_event.valid */
enum gpuship_arg_valid {
	GPUSHIP_ARG_BYTES = 1 << 0,
	GPUSHIP_ARG_DEVICE_PTR = 1 << 1,
	GPUSHIP_ARG_STREAM = 1 << 2,
	GPUSHIP_ARG_LAUNCH = 1 << 3, /* grid, block and shared_mem_bytes */
	GPUSHIP_ARG_GRID = 1 << 4,   /* grid and block[0..2] only (the register arguments) */
	GPUSHIP_ARG_HANDLE = 1 << 5,
	GPUSHIP_ARG_PARENT_HANDLE = 1 << 6,
	GPUSHIP_ARG_UUID = 1 << 7, /* grid[0..2] and block[0] hold a CUuuid's 16 bytes */
};

/* One NVIDIA kernel-driver operation: an ioctl on an NVIDIA device file (syscall tracepoints),
 * or one call of a driver function (fentry/fexit slot). Emitted when it returns. */
struct driver_event {
	__u32 record_kind;   /* GPUSHIP_RECORD_DRIVER */
	__u32 hook;          /* GPUSHIP_DRIVER_HOOK_IOCTL, or GPUSHIP_DRIVER_HOOK_SLOT_BASE + slot */
	__u64 start_boot_ns; /* bpf_ktime_get_boot_ns() at entry */
	__u64 duration_ns;
	__u32 pid;
	__u32 tid;
	__s64 ret;           /* the syscall's return value (ioctl); 0 for function slots */
	__u32 fd;
	__u32 request;       /* the ioctl request number */
	__u32 major;         /* device file major and minor (ioctl) */
	__u32 minor;
	char comm[GPUSHIP_COMM_LEN];
};

enum gpuship_driver_hook {
	GPUSHIP_DRIVER_HOOK_IOCTL = 0,
	GPUSHIP_DRIVER_HOOK_SLOT_BASE = 1,
	GPUSHIP_DRIVER_SLOTS = 8,       /* fentry/fexit program pairs in driver.bpf.c */
	GPUSHIP_DRIVER_MAX_MAJORS = 8,  /* device majors the ioctl hook keeps */
};

/*
 * Attach cookie of a CUDA probe: which function it is and where its arguments are.
 * bits  0..21  function id
 * bit  22      a hot function under the overhead budget (cuda_budget.h)
 * bit  23      set on the cookies of per-process (pid-filtered) hot links
 * bits 24..27  argument index holding a name to read (a kernel's), 0xF = none
 * bit  28      with stats: a successful call is a row only when its answer (the value read
 *              through the out pointer) is new for (process, function, handle); repeats are
 *              only counted (cuKernelGetFunction, asked for the same kernel on every step)
 * bit  29      the call changes the calling thread's current context (set, push, pop,
 *              create): the kernel lookups that thread answered before are asked again
 * bit  30      the call may change every thread's answers (a context destroyed, a primary
 *              context released or reset, a library or module unloaded)
 * bits 32..35  argument index (0-based) holding a byte count, 0xF = none
 * bits 36..39  argument index holding a device pointer, 0xF = none
 * bits 40..43  argument index holding a pointer to the device pointer to read at return
 *              (allocations), 0xF = none
 * bits 44..47  argument index holding the stream, 0xF = none
 * bits 48..51  launch layout: GPUSHIP_LAUNCH_*
 * bit  52      entry only; bit 53: stats (below)
 * bits 54..57  argument index holding the handle the call uses, 0xF = none
 * bits 58..61  argument index holding the parent handle, 0xF = none
 * bit  62      the value read at return through the out pointer is the call's handle (a
 *              getter's or a load's), not a device pointer
 * bit  63      the out pointer points at a 16-byte CUuuid (cuDeviceGetUuid): read whole at
 *              return into the launch area (GPUSHIP_ARG_UUID)
 * Argument indexes refer to the first six integer arguments (the registers on x86_64).
 */
enum gpuship_cookie_layout {
	GPUSHIP_COOKIE_NONE = 0xF,
	GPUSHIP_COOKIE_FUNCTION_MASK = 0x3FFFFF,
	/* One bit: a hot function under the overhead budget (cuda_budget.h): its traps count
	 * toward its process's cost, and only the links of the current hot mode record it. */
	GPUSHIP_COOKIE_HOT_SHIFT = 22,
	/* One bit: the link carrying this cookie is a per-process (pid-filtered) hot link. */
	GPUSHIP_COOKIE_PER_PROCESS_SHIFT = 23,
	GPUSHIP_COOKIE_NAME_SHIFT = 24,
	GPUSHIP_COOKIE_ROW_IF_NEW_SHIFT = 28,
	GPUSHIP_COOKIE_THREAD_CONTEXT_SHIFT = 29,
	GPUSHIP_COOKIE_ALL_ANSWERS_SHIFT = 30,
	GPUSHIP_COOKIE_BYTES_SHIFT = 32,
	GPUSHIP_COOKIE_DEVICE_PTR_SHIFT = 36,
	GPUSHIP_COOKIE_OUT_PTR_SHIFT = 40,
	GPUSHIP_COOKIE_STREAM_SHIFT = 44,
	GPUSHIP_COOKIE_LAUNCH_SHIFT = 48,
	/* One bit: record the call at entry, with no return probe (no duration, no result). */
	GPUSHIP_COOKIE_ENTRY_ONLY_SHIFT = 52,
	/* One bit: add the call to the per-interval statistics instead of the ring; a call that
	 * failed or took at least slow_call_ns still goes to the ring as well. */
	GPUSHIP_COOKIE_STATS_SHIFT = 53,
	GPUSHIP_COOKIE_HANDLE_SHIFT = 54,
	GPUSHIP_COOKIE_PARENT_SHIFT = 58,
	GPUSHIP_COOKIE_OUT_IS_HANDLE_SHIFT = 62,
	GPUSHIP_COOKIE_OUT_IS_UUID_SHIFT = 63,
};

/*
 * Per-interval statistics of the functions in `stats` mode, kept in the call_stats hash map:
 * one entry per (process, function, CUresult, generation). The agent flips stats_generation
 * every interval and, a poll later (no probe is still in the old generation's entries by
 * then), takes the old generation's entries out with lookup-and-delete.
 *
 * Durations land in GPUSHIP_STATS_BUCKETS buckets: bucket 0 is [0, 64) ns; from 64 ns on, each
 * power of two is split in four equal buckets ([64, 80), [80, 96), [96, 112), [112, 128),
 * [128, 160), ...), so any quantile read from them is within 25% of the true value; the last
 * bucket also takes everything longer.
 */
enum gpuship_stats_layout {
	GPUSHIP_STATS_BUCKETS = 128,
	GPUSHIP_STATS_FIRST_OCTAVE = 6, /* 2^6 = 64 ns: the end of bucket 0 */
	GPUSHIP_STATS_SUB_BUCKETS_LOG2 = 2,
};

struct cuda_stats_key {
	__u32 tgid;
	__u32 function_id;
	__u32 result;     /* CUresult, or GPUSHIP_RESULT_NOT_CAPTURED for entry-only functions */
	__u32 generation; /* stats_generation & 1 when the call was added */
};

struct cuda_stats_value {
	__u64 calls;
	__u64 duration_sum_ns;
	__u64 duration_min_ns; /* 0 until the first timed call (a timed call never takes 0 ns) */
	__u64 duration_max_ns;
	__u64 bytes_sum;       /* of the byte-count argument, when the function has one */
	char comm[GPUSHIP_COMM_LEN]; /* the thread that made the entry's first call */
	__u32 buckets[GPUSHIP_STATS_BUCKETS]; /* timed calls per duration bucket */
};

/*
 * The flight recorder (bpf/cuda.bpf.c `recorder`): the latest calls of `stats` functions (the
 * calls that otherwise become no row) at full detail, in one ring of slots per CPU. The agent
 * reads it when an incident starts. A slot is whole when seq_begin == seq_end != 0: the program
 * writes seq_begin, then the event, then seq_end, so a copy taken while it writes has
 * seq_begin != seq_end and is skipped.
 */
struct cuda_recorder_slot {
	__u64 seq_begin;
	struct cuda_event event;
	__u64 seq_end;
};

/* cuda_event.result of an entry-only record: no CUresult was seen. */
enum gpuship_cuda_result {
	GPUSHIP_RESULT_NOT_CAPTURED = 0x7fffffff,
};

enum gpuship_launch_layout {
	GPUSHIP_LAUNCH_NONE = 0,
	GPUSHIP_LAUNCH_KERNEL = 1,    /* cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shmem, stream, ...) */
	GPUSHIP_LAUNCH_KERNEL_EX = 2, /* cuLaunchKernelEx(const CUlaunchConfig *, f, ...) */
};

/*
 * Referencing every enum from a global makes libbpf-cargo emit it into the skeleton's `types`,
 * so Rust uses these values instead of copies. Each program includes this once.
 */
#define GPUSHIP_EXPORT_ABI_ENUMS()                                  \
	enum gpuship_record_kind gpuship_abi_record_kind = 0;       \
	enum gpuship_ring_stat gpuship_abi_ring_stat = 0;           \
	enum gpuship_xid_flag gpuship_abi_xid_flag = 0;             \
	enum gpuship_arg_valid gpuship_abi_arg_valid = 0;           \
	enum gpuship_cookie_layout gpuship_abi_cookie_layout = 0;   \
	enum gpuship_launch_layout gpuship_abi_launch_layout = 0;   \
	enum gpuship_driver_hook gpuship_abi_driver_hook = 0;       \
	enum gpuship_cuda_result gpuship_abi_cuda_result = 0;       \
	enum gpuship_stats_layout gpuship_abi_stats_layout = 0;     \
	enum gpuship_name_flag gpuship_abi_name_flag = 0

#endif /* GPUSHIP_EVENTS_H */
