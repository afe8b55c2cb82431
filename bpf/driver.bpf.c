// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * NVIDIA kernel-driver activity, without kprobes.
 *
 * - ioctl: the syscall tracepoints syscalls:sys_{enter,exit}_ioctl, kept only when the fd is a
 *   character device whose major is one of the NVIDIA majors the agent hands in as rodata
 *   (nvidia, nvidia-uvm, ...; read from /proc/devices). Entry stores the start time, fd, request
 *   and device per thread; exit emits one record with duration and return value.
 * - driver functions: GPUSHIP_DRIVER_SLOTS fentry/fexit pairs whose targets the agent sets before
 *   load (functions of the nvidia modules, through their BTF); unused slots are not loaded.
 *
 * Records go to their own ring without a wakeup per event; the consumer drains it on its timer.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "gpuship_events.h"
#include "gpuship_thread.h"
#include "gpuship_count.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* Device majors whose ioctls are kept (the first device_major_count entries). */
const volatile __u32 device_majors[GPUSHIP_DRIVER_MAX_MAJORS] = {};
const volatile __u32 device_major_count = 0;

/* Makes the event struct visible to libbpf-cargo so Rust gets it as types::driver_event. */
struct driver_event driver_event_layout = {};

GPUSHIP_EXPORT_ABI_ENUMS();

struct ioctl_start {
	__u64 start_boot_ns;
	__u32 fd;
	__u32 request;
	__u32 major;
	__u32 minor;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32); /* tid */
	__type(value, struct ioctl_start);
} ioctl_inflight SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64); /* tid << 8 | slot */
	__type(value, __u64); /* start */
} call_inflight SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1024 * 1024);
} driver_ring SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, GPUSHIP_STAT_COUNT);
	__type(key, __u32);
	__type(value, __u64);
} driver_stats SEC(".maps");

static __always_inline void count(__u32 slot)
{
	gpuship_count(&driver_stats, slot);
}

/* The device numbers of `fd` when it is a device file with a kept major. */
static __always_inline bool kept_device(__u32 fd, __u32 *major, __u32 *minor)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	struct fdtable *fdt = BPF_CORE_READ(task, files, fdt);
	struct file **fds;
	struct file *file = NULL;
	__u32 rdev, maj;

	if (!fdt || fd >= BPF_CORE_READ(fdt, max_fds))
		return false;
	fds = BPF_CORE_READ(fdt, fd);
	if (bpf_probe_read_kernel(&file, sizeof(file), &fds[fd]) < 0 || !file)
		return false;
	rdev = BPF_CORE_READ(file, f_inode, i_rdev);
	maj = rdev >> 20; /* the kernel's dev_t: 12-bit major, 20-bit minor */
	for (int i = 0; i < GPUSHIP_DRIVER_MAX_MAJORS; i++) {
		if (i >= device_major_count)
			break;
		if (device_majors[i] == maj && maj != 0) {
			*major = maj;
			*minor = rdev & 0xfffff;
			return true;
		}
	}
	return false;
}

SEC("tracepoint/syscalls/sys_enter_ioctl")
int handle_ioctl_enter(struct trace_event_raw_sys_enter *ctx)
{
	struct ioctl_start start = {};
	__u32 tid = (__u32)bpf_get_current_pid_tgid();

	start.fd = (__u32)ctx->args[0];
	start.request = (__u32)ctx->args[1];
	if (!kept_device(start.fd, &start.major, &start.minor))
		return 0;
	start.start_boot_ns = bpf_ktime_get_boot_ns();
	if (bpf_map_update_elem(&ioctl_inflight, &tid, &start, BPF_ANY) < 0)
		count(GPUSHIP_STAT_INFLIGHT_FULL);
	return 0;
}

SEC("tracepoint/syscalls/sys_exit_ioctl")
int handle_ioctl_exit(struct trace_event_raw_sys_exit *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)pid_tgid;
	struct ioctl_start *start = bpf_map_lookup_elem(&ioctl_inflight, &tid);
	struct driver_event *event;

	if (!start)
		return 0; /* not a kept device, or entered before we attached */
	event = bpf_ringbuf_reserve(&driver_ring, sizeof(*event), 0);
	if (!event) {
		count(GPUSHIP_STAT_RESERVE_FAILED);
		bpf_map_delete_elem(&ioctl_inflight, &tid);
		return 0;
	}
	event->record_kind = GPUSHIP_RECORD_DRIVER;
	event->hook = GPUSHIP_DRIVER_HOOK_IOCTL;
	event->start_boot_ns = start->start_boot_ns;
	event->duration_ns = bpf_ktime_get_boot_ns() - start->start_boot_ns;
	event->pid = pid_tgid >> 32;
	event->tid = tid;
	event->ret = ctx->ret;
	event->fd = start->fd;
	event->request = start->request;
	event->major = start->major;
	event->minor = start->minor;
	gpuship_thread_name(event->comm);
	bpf_map_delete_elem(&ioctl_inflight, &tid);
	bpf_ringbuf_submit(event, BPF_RB_NO_WAKEUP);
	count(GPUSHIP_STAT_SUBMITTED);
	return 0;
}

static __always_inline int slot_entry(__u32 slot)
{
	__u64 key = ((__u64)(__u32)bpf_get_current_pid_tgid() << 8) | slot;
	__u64 now = bpf_ktime_get_boot_ns();

	if (bpf_map_update_elem(&call_inflight, &key, &now, BPF_ANY) < 0)
		count(GPUSHIP_STAT_INFLIGHT_FULL);
	return 0;
}

static __always_inline int slot_exit(__u32 slot)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u64 key = ((__u64)(__u32)pid_tgid << 8) | slot;
	__u64 *start = bpf_map_lookup_elem(&call_inflight, &key);
	struct driver_event *event;

	if (!start) {
		count(GPUSHIP_STAT_UNMATCHED_RETURN);
		return 0;
	}
	event = bpf_ringbuf_reserve(&driver_ring, sizeof(*event), 0);
	if (!event) {
		count(GPUSHIP_STAT_RESERVE_FAILED);
		bpf_map_delete_elem(&call_inflight, &key);
		return 0;
	}
	__builtin_memset(event, 0, sizeof(*event));
	event->record_kind = GPUSHIP_RECORD_DRIVER;
	event->hook = GPUSHIP_DRIVER_HOOK_SLOT_BASE + slot;
	event->start_boot_ns = *start;
	event->duration_ns = bpf_ktime_get_boot_ns() - *start;
	event->pid = pid_tgid >> 32;
	event->tid = (__u32)pid_tgid;
	gpuship_thread_name(event->comm);
	bpf_map_delete_elem(&call_inflight, &key);
	bpf_ringbuf_submit(event, BPF_RB_NO_WAKEUP);
	count(GPUSHIP_STAT_SUBMITTED);
	return 0;
}

#define DRIVER_SLOT(n)                                            \
	SEC("fentry")                                             \
	int BPF_PROG(fentry_slot##n) { return slot_entry(n); }    \
	SEC("fexit")                                              \
	int BPF_PROG(fexit_slot##n) { return slot_exit(n); }

DRIVER_SLOT(0)
DRIVER_SLOT(1)
DRIVER_SLOT(2)
DRIVER_SLOT(3)
DRIVER_SLOT(4)
DRIVER_SLOT(5)
DRIVER_SLOT(6)
DRIVER_SLOT(7)
