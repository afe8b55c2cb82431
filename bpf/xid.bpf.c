// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * XID capture from the NVIDIA driver's tracepoint nvidia:nvidia_dev_xid.
 *
 * The record layout is read from the tracepoint's format file by the agent and handed in as
 * rodata (field offsets), so a driver that moves a field does not need a new build. Both string
 * fields are __data_loc: a u32 whose low 16 bits are the offset from the start of the record and
 * whose high 16 bits are the length; we copy at most that length (never past the record) and at
 * most the buffer size. XIDs are rare and urgent: every submit wakes the consumer.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "gpuship_events.h"
#include "gpuship_thread.h"
#include "gpuship_count.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* Offsets of the fields in the tracepoint record, from events/nvidia/nvidia_dev_xid/format. */
const volatile __u32 dev_field_offset = 8;
const volatile __u32 error_code_field_offset = 12;
const volatile __u32 msg_field_offset = 16;

/* Makes the event struct visible to libbpf-cargo so Rust gets it as types::xid_event. */
struct xid_event xid_event_layout = {};
GPUSHIP_EXPORT_ABI_ENUMS();

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} xid_ring SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, GPUSHIP_STAT_COUNT);
	__type(key, __u32);
	__type(value, __u64);
} xid_stats SEC(".maps");

static __always_inline void count(__u32 slot)
{
	gpuship_count(&xid_stats, slot);
}

/* Copies one __data_loc string; returns the bytes copied without the NUL, sets *truncated. */
static __always_inline __u16 copy_data_loc(void *record, __u32 field_offset, char *dst, __u32 dst_size,
					   bool *truncated)
{
	__u32 loc = 0;
	__u32 offset, len;
	long copied;

	if (bpf_probe_read_kernel(&loc, sizeof(loc), record + field_offset) < 0)
		return 0;
	offset = loc & 0xffff;
	len = loc >> 16; /* includes the NUL the kernel stores */
	if (len == 0)
		return 0;
	if (len > dst_size) {
		*truncated = true;
		len = dst_size;
	}
	/* Bounded by both the record's own length and our buffer. */
	copied = bpf_probe_read_kernel_str(dst, len, record + offset);
	if (copied <= 0)
		return 0;
	return (__u16)(copied - 1);
}

SEC("tracepoint")
int handle_nvidia_dev_xid(void *ctx)
{
	struct xid_event *event;
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	bool msg_truncated = false, dev_truncated = false;

	event = bpf_ringbuf_reserve(&xid_ring, sizeof(*event), 0);
	if (!event) {
		count(GPUSHIP_STAT_RESERVE_FAILED);
		return 0;
	}
	event->record_kind = GPUSHIP_RECORD_XID;
	event->boot_time_ns = bpf_ktime_get_boot_ns();
	event->pid = pid_tgid >> 32;
	event->tid = (__u32)pid_tgid;
	event->flags = 0;
	event->error_code = 0;
	bpf_probe_read_kernel(&event->error_code, sizeof(event->error_code), ctx + error_code_field_offset);
	gpuship_thread_name(event->comm);
	event->dev_len = copy_data_loc(ctx, dev_field_offset, event->dev, sizeof(event->dev), &dev_truncated);
	event->msg_len = copy_data_loc(ctx, msg_field_offset, event->msg, sizeof(event->msg), &msg_truncated);
	if (msg_truncated)
		event->flags |= GPUSHIP_XID_MSG_TRUNCATED;
	if (dev_truncated)
		event->flags |= GPUSHIP_XID_DEV_TRUNCATED;
	bpf_ringbuf_submit(event, BPF_RB_FORCE_WAKEUP);
	count(GPUSHIP_STAT_SUBMITTED);
	return 0;
}
