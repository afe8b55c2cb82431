// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * CUDA driver API calls from uprobes/uretprobes on libcuda.so.1.
 *
 * One entry program and one return program serve every probed function: the attach cookie says
 * which function fired and where its arguments live (see gpuship_events.h), so adding a function
 * is a table row in the agent, not new BPF code. Entry stores the decoded arguments for
 * (thread, function); return completes the record with the result and duration and submits
 * it. Each thread has a slot in an array (indexed by its tid; cuda_call_slots.h), claimed with
 * one compare-and-swap and released with one exchange, so the usual call needs no hash-table insert
 * and delete (lock, free list, rehash of the key); only a call whose slot is busy (tids equal
 * modulo the slot count, or a nested call of another probed function) goes through the hash
 * table. Calls are frequent, so submits do not wake the consumer (a wakeup costs over a
 * microsecond in the traced process) unless the ring passes a fill threshold; the agent drains
 * the ring on a short timer.
 *
 * These programs can be preempted (migration is disabled, preemption is not): nothing a call
 * writes is reachable by another task mid-program (see on_entry), and counters are atomic.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "gpuship_events.h"
#include "gpuship_count.h"
#include "gpuship_thread.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* When set, only processes in traced_tgids are recorded (gpuship run --pid / -- command). */
const volatile bool filter_by_tgid = false;
/* Unread bytes in the ring above which a submit wakes the consumer anyway. */
const volatile __u64 wakeup_threshold_bytes = 4 * 1024 * 1024;
/* A call of a `stats` function at least this long (ns) is also sent as a row; 0: none is. */
const volatile __u64 slow_call_ns = 0;
/* Whether the flight recorder keeps a launch's stack-passed arguments (block z, shared memory,
 * stream); reading them costs each recorded launch a user-memory read (docs/performance.md). */
const volatile bool recorder_launch_details = false;

/* Makes the event struct visible to libbpf-cargo so Rust gets it as types::cuda_event. */
struct cuda_event cuda_event_layout = {};
struct cuda_named_event cuda_named_event_layout = {};
struct cuda_stats_key cuda_stats_key_layout = {};
struct cuda_stats_value cuda_stats_value_layout = {};
struct cuda_recorder_slot cuda_recorder_slot_layout = {};
GPUSHIP_EXPORT_ABI_ENUMS();

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 16 * 1024 * 1024);
} cuda_ring SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, GPUSHIP_STAT_COUNT);
	__type(key, __u32);
	__type(value, __u64);
} cuda_stats SEC(".maps");

#include "cuda_call_slots.h"

/* Processes to record when filter_by_tgid is set; children join through handle_fork. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, __u8);
} traced_tgids SEC(".maps");

static __always_inline void count(__u32 slot)
{
	gpuship_count(&cuda_stats, slot);
}

static __always_inline bool is_traced(__u32 tgid)
{
	if (!filter_by_tgid)
		return true;
	return bpf_map_lookup_elem(&traced_tgids, &tgid) != NULL;
}

#include "cuda_arguments.h"
#include "cuda_stats_mode.h"
#include "cuda_budget.h"
#include "cuda_lookup_memo.h"

/* The kfunc of a `uprobe.session` program (Linux >= 6.13); weak, so that the object loads
 * where it is missing (the session program is then not loaded). */
extern bool bpf_session_is_return(void) __ksym __weak;

/* Entry-only functions (no return probe): the record goes out now, without duration or result.
 * `event` is on this program's stack; the ring record is reserved only for the copy, so a
 * preempted program never holds a busy record that stops the consumer at it. */
static __always_inline int submit_at_entry(const struct cuda_event *event)
{
	struct cuda_event *ev = bpf_ringbuf_reserve(&cuda_ring, sizeof(*ev), 0);
	__u64 avail;

	if (!ev) {
		count(GPUSHIP_STAT_RESERVE_FAILED);
		return 0;
	}
	__builtin_memcpy(ev, event, sizeof(*ev));
	ev->duration_ns = 0;
	ev->result = GPUSHIP_RESULT_NOT_CAPTURED;
	avail = bpf_ringbuf_query(&cuda_ring, BPF_RB_AVAIL_DATA);
	bpf_ringbuf_submit(ev, avail >= wakeup_threshold_bytes ? BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP);
	count(GPUSHIP_STAT_SUBMITTED);
	return 0;
}

/*
 * Every byte of a call is written to memory that no other task can reach while this program
 * runs, because uprobe programs can be preempted (migration is disabled, preemption is not): the
 * thread's own slot (claimed by compare-and-swap), or this program's stack, which is then
 * copied into the ring (entry-only) or into the hash table under the thread's own key. A
 * per-CPU scratch buffer would be shared with every task that runs on this CPU meanwhile.
 * `lookup`: a lookup under the session program (cuda_lookup_memo.h), NULL for any other call;
 * a repeat is counted like an entry-only call.
 */
static __always_inline int on_entry(struct pt_regs *ctx, __u64 pid_tgid, __u64 cookie,
				    const struct lookup_stamp *lookup)
{
	struct call_key key = { .tid = (__u32)pid_tgid,
				.function_id = cookie & GPUSHIP_COOKIE_FUNCTION_MASK };
	struct call_entry local, *entry;
	struct call_slot *slot = NULL;
	bool entry_only = (lookup && lookup->repeat) || ((cookie >> GPUSHIP_COOKIE_ENTRY_ONLY_SHIFT) & 1);
	bool stats = (cookie >> GPUSHIP_COOKIE_STATS_SHIFT) & 1;

	if (!link_records(cookie))
		return 0;
	invalidate_lookups(cookie);
	if (!is_traced(pid_tgid >> 32))
		return 0;
	if (count_process_traps)
		count_traps(pid_tgid >> 32, cookie, !entry_only);
	if (!entry_only)
		slot = claim_slot(slot_owner(pid_tgid, cookie));
	entry = slot ? &slot->entry : &local;
	fill_entry(ctx, entry, pid_tgid, cookie, stats);
	if (lookup && !lookup->repeat) {
		entry->lookup_epoch = lookup->epoch;
		entry->lookup_generation = lookup->generation;
	}
	if (entry_only && stats) {
		add_to_stats(&entry->event, GPUSHIP_RESULT_NOT_CAPTURED, false);
		entry->event.result = GPUSHIP_RESULT_NOT_CAPTURED;
		record_call(entry);
		return 0;
	}
	if (entry_only)
		return submit_at_entry(&entry->event);
	if (slot)
		return 0;
	if (bpf_map_update_elem(&inflight, &key, &local, BPF_ANY) < 0)
		count(GPUSHIP_STAT_INFLIGHT_FULL);
	return 0;
}

/*
 * The ring record of a call that takes a name: the call, then the name from the caller's
 * memory (a kernel name, up to GPUSHIP_KERNEL_NAME_LEN bytes). The name is read into the
 * reserved record, too large for this program's stack; these calls are rare (one per kernel
 * a process looks up), so the record stays busy for one short read. NULL when the ring is full.
 */
static __always_inline struct cuda_event *reserve_named(struct call_entry *entry)
{
	struct cuda_named_event *named = bpf_ringbuf_reserve(&cuda_ring, sizeof(*named), 0);
	long read;

	if (!named)
		return NULL;
	__builtin_memcpy(&named->call, &entry->event, sizeof(named->call));
	named->call.record_kind = GPUSHIP_RECORD_CUDA_NAMED;
	named->name_ptr = entry->name_ptr;
	named->name_flags = 0;
	read = bpf_probe_read_user_str(named->name, sizeof(named->name), (void *)entry->name_ptr);
	if (read <= 0) {
		named->name[0] = 0;
		named->name_len = 0;
		named->name_flags = GPUSHIP_NAME_UNREADABLE;
	} else {
		named->name_len = read - 1;
		/* A name of exactly sizeof(name) - 1 bytes reads the same: the agent checks. */
		if (read >= (long)sizeof(named->name))
			named->name_flags = GPUSHIP_NAME_TRUNCATED;
	}
	return &named->call;
}


/* A probed lookup's answer is remembered (cuda_lookup_memo.h) once it is delivered: counted as
 * an answer sent before, or sent as a row with the answer read. */
static __always_inline int on_return(struct pt_regs *ctx, long ret)
{
	__u64 now = bpf_ktime_get_boot_ns();
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u64 cookie = bpf_get_attach_cookie(ctx);
	struct call_key key = { .tid = (__u32)pid_tgid,
				.function_id = cookie & GPUSHIP_COOKIE_FUNCTION_MASK };
	struct call_entry *entry;
	struct call_slot *slot;
	struct cuda_event *ev;
	__u64 out_value = 0;
	bool have_out_value = false;
	__u32 uuid[4];
	bool have_uuid = false;
	__u64 avail;
	__u64 kernel, lookup_epoch;
	__u32 lookup_generation;

	if (!link_records(cookie))
		return 0;
	invalidate_after(cookie, (__u32)ret);
	if (!is_traced(pid_tgid >> 32))
		return 0;
	slot = held_slot(slot_owner(pid_tgid, cookie));
	entry = slot ? &slot->entry : bpf_map_lookup_elem(&inflight, &key);
	if (!entry) {
		count(GPUSHIP_STAT_UNMATCHED_RETURN);
		return 0;
	}
	kernel = entry->event.parent_handle;
	lookup_epoch = entry->lookup_epoch;
	lookup_generation = (__u32)ret == 0 ? entry->lookup_generation : 0;
	if ((cookie >> GPUSHIP_COOKIE_STATS_SHIFT) & 1) {
		/* Completed in the slot or hash entry, which only this thread touches until release. */
		entry->event.duration_ns = now - entry->event.start_boot_ns;
		add_to_stats(&entry->event, (__u32)ret, true);
		if ((__u32)ret == 0 && (slow_call_ns == 0 || entry->event.duration_ns < slow_call_ns) &&
		    (!((cookie >> GPUSHIP_COOKIE_ROW_IF_NEW_SHIFT) & 1) || answer_sent_before(entry))) {
			/* No row: the flight recorder keeps it. */
			entry->event.result = 0;
			record_call(entry);
			release(slot, &key);
			if (lookup_generation)
				remember_lookup(kernel, lookup_epoch, lookup_generation);
			return 0;
		}
		/* A row after all: decode what entry left for later. */
		complete_deferred(entry);
	}
	/* An allocation's pointer (or a getter's handle) exists only once it succeeded. Read
	 * before the reservation, so that the ring record is busy only for the copy. */
	if (entry->out_ptr && (__u32)ret == 0) {
		if ((cookie >> GPUSHIP_COOKIE_OUT_IS_UUID_SHIFT) & 1)
			have_uuid = bpf_probe_read_user(uuid, sizeof(uuid), (void *)entry->out_ptr) == 0;
		else
			have_out_value = bpf_probe_read_user(&out_value, sizeof(out_value),
							     (void *)entry->out_ptr) == 0;
	}
	if (entry->name_ptr)
		ev = reserve_named(entry);
	else
		ev = bpf_ringbuf_reserve(&cuda_ring, sizeof(*ev), 0);
	if (!ev) {
		count(GPUSHIP_STAT_RESERVE_FAILED);
		if ((cookie >> GPUSHIP_COOKIE_ROW_IF_NEW_SHIFT) & 1)
			forget_answer(entry);
		release(slot, &key);
		return 0;
	}
	if (!entry->name_ptr)
		__builtin_memcpy(ev, &entry->event, sizeof(*ev));
	ev->duration_ns = now - ev->start_boot_ns;
	ev->result = (__u32)ret;
	if (have_out_value && ((cookie >> GPUSHIP_COOKIE_OUT_IS_HANDLE_SHIFT) & 1)) {
		ev->handle = out_value;
		ev->valid |= GPUSHIP_ARG_HANDLE;
	} else if (have_out_value) {
		ev->device_ptr = out_value;
		ev->valid |= GPUSHIP_ARG_DEVICE_PTR;
	} else if (have_uuid) {
		ev->grid[0] = uuid[0];
		ev->grid[1] = uuid[1];
		ev->grid[2] = uuid[2];
		ev->block[0] = uuid[3];
		ev->valid |= GPUSHIP_ARG_UUID;
	}
	release(slot, &key);
	avail = bpf_ringbuf_query(&cuda_ring, BPF_RB_AVAIL_DATA);
	bpf_ringbuf_submit(ev, avail >= wakeup_threshold_bytes ? BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP);
	count(GPUSHIP_STAT_SUBMITTED);
	if (lookup_generation && have_out_value)
		remember_lookup(kernel, lookup_epoch, lookup_generation);
	return 0;
}

/* Entry of a lookup under the session program: a repeat (same thread, context and kernel, an
 * out pointer to write) is counted at entry and its return skipped (returns 1); any other
 * lookup is recorded as usual and keeps its return (returns 0). An untraced process's lookup
 * skips its return too. */
static __always_inline int on_lookup_entry(struct pt_regs *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u64 cookie = bpf_get_attach_cookie(ctx);
	struct lookup_stamp lookup = {};
	struct call_args args;
	__u64 kernel, out;

	if (!is_traced(pid_tgid >> 32))
		return 1;
	read_args(ctx, &args);
	kernel = arg_at(&args, cookie_field(cookie, GPUSHIP_COOKIE_PARENT_SHIFT));
	out = arg_at(&args, cookie_field(cookie, GPUSHIP_COOKIE_OUT_PTR_SHIFT));
	lookup.repeat = lookup_is_repeat(kernel, &lookup.epoch, &lookup.generation) && out;
	on_entry(ctx, pid_tgid, cookie, &lookup);
	return lookup.repeat;
}

/*
 * Two attach styles for the same logic: one link per symbol (any kernel with uprobes and
 * cookies), or one uprobe_multi link per library (Linux >= 6.6), which attaches and, above all,
 * detaches in one step instead of one RCU grace period per symbol.
 */
SEC("uprobe")
int BPF_KPROBE(cuda_call_entry)
{
	return on_entry(ctx, bpf_get_current_pid_tgid(), bpf_get_attach_cookie(ctx), NULL);
}

SEC("uretprobe")
int BPF_KRETPROBE(cuda_call_return, long ret)
{
	return on_return(ctx, ret);
}

SEC("uprobe.multi")
int BPF_KPROBE(cuda_call_entry_multi)
{
	return on_entry(ctx, bpf_get_current_pid_tgid(), bpf_get_attach_cookie(ctx), NULL);
}

SEC("uretprobe.multi")
int BPF_KRETPROBE(cuda_call_return_multi, long ret)
{
	return on_return(ctx, ret);
}

/*
 * Kernel lookups whose repeats skip their return (cuda_lookup_memo.h): one program for entry
 * and return (Linux >= 6.13); the entry's stamps reach the return in the call's entry.
 */
SEC("uprobe.session")
int cuda_lookup_session(struct pt_regs *ctx)
{
	if (bpf_session_is_return())
		return on_return(ctx, PT_REGS_RC(ctx));
	return on_lookup_entry(ctx);
}

/* A traced process's children are traced too (gpuship run -- COMMAND traces the whole tree). */
SEC("tp_btf/sched_process_fork")
int BPF_PROG(handle_fork, struct task_struct *parent, struct task_struct *child)
{
	__u32 parent_tgid = BPF_CORE_READ(parent, tgid);
	__u32 child_tgid = BPF_CORE_READ(child, tgid);
	__u8 one = 1;

	if (!filter_by_tgid || parent_tgid == child_tgid)
		return 0;
	if (bpf_map_lookup_elem(&traced_tgids, &parent_tgid))
		bpf_map_update_elem(&traced_tgids, &child_tgid, &one, BPF_ANY);
	return 0;
}

/* Processes that open a libcuda, for library discovery (agent/sources/cuda/discovery). */
#include "cuda_library_opens.h"
