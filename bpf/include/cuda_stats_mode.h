/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The `stats` half of bpf/cuda.bpf.c, included by it once, after its shared maps and helpers:
 * per-interval statistics of `stats` functions (the call_stats table, its duration histogram
 * and extremes) and the flight recorder that keeps their latest calls per CPU. It defines maps
 * and globals, so only cuda.bpf.c includes it.
 */
#ifndef GPUSHIP_CUDA_STATS_MODE_H
#define GPUSHIP_CUDA_STATS_MODE_H

/* Which half of call_stats calls are added to now (the agent flips it every interval). */
volatile __u32 stats_generation = 0;
/* The flight recorder: on, and log2 of its slots per CPU (the agent sizes `recorder`). */
const volatile bool recorder_enabled = false;
const volatile __u32 recorder_shift = 0;

/* The flight recorder's slots: CPU c owns [c << recorder_shift, (c + 1) << recorder_shift). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct cuda_recorder_slot);
} recorder SEC(".maps");

/* Per CPU: slots claimed so far (the next slot is head modulo the ring). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} recorder_head SEC(".maps");

/*
 * Per-interval statistics of `stats` functions (see gpuship_events.h). Entries are allocated
 * when first used (no preallocation): a few hundred live at a time on a busy node, and the
 * agent sets max_entries; a call that finds the table full is counted (GPUSHIP_STAT_STATS_FULL).
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 8192);
	__type(key, struct cuda_stats_key);
	__type(value, struct cuda_stats_value);
} call_stats SEC(".maps");

/*
 * Answers already sent as rows by functions whose repeats are only counted (cookie bit
 * GPUSHIP_COOKIE_ROW_IF_NEW): (process image, function, handle asked about, answer). LRU: an
 * answer evicted under churn costs one repeated row, never a missing one. The agent deletes a
 * process's entries once it exits, so that a reused pid learns its handles again.
 */
struct sent_answer_key {
	__u32 tgid;
	__u32 function_id;
	__u64 handle;
	__u64 answer;
	/* The process image (task->self_exec_id): after an exec the same pid's handles, even
	 * when their values repeat, belong to another program, whose answers are new rows. */
	__u64 exec_id;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct sent_answer_key);
	__type(value, __u8);
} sent_answers SEC(".maps");

/* Makes the key visible to libbpf-cargo: the agent deletes exited processes' entries. */
struct sent_answer_key sent_answer_key_layout = {};

/* The key of this call's answer; false when the answer cannot be read. */
static __always_inline bool answer_key(const struct call_entry *entry, struct sent_answer_key *key)
{
	key->tgid = entry->event.pid;
	key->function_id = entry->event.function_id;
	key->handle = entry->event.handle;
	key->answer = 0;
	key->exec_id = bpf_get_current_task_btf()->self_exec_id;
	return entry->out_ptr &&
	       bpf_probe_read_user(&key->answer, sizeof(key->answer), (void *)entry->out_ptr) == 0;
}

/* True when this successful call's answer was sent before; else remembers it (the call then
 * becomes a row). An answer that cannot be read is treated as new. */
static __always_inline bool answer_sent_before(const struct call_entry *entry)
{
	struct sent_answer_key key;
	__u8 one = 1;

	if (!answer_key(entry, &key))
		return false;
	if (bpf_map_lookup_elem(&sent_answers, &key))
		return true;
	bpf_map_update_elem(&sent_answers, &key, &one, BPF_ANY);
	return false;
}

/* Forgets the answer of a row that could not be sent (the ring was full): the next call with
 * it is then a row again, so the answer is not lost for good. */
static __always_inline void forget_answer(const struct call_entry *entry)
{
	struct sent_answer_key key;

	if (answer_key(entry, &key))
		bpf_map_delete_elem(&sent_answers, &key);
}

/* The value a new call_stats entry starts from (comm and counts are filled in place). */
const struct cuda_stats_value empty_stats = {};

/* floor(log2(v)) for v > 0, without a loop (the BPF instruction set has no clz). */
static __always_inline __u32 log2_u64(__u64 v)
{
	__u32 r = 0, shift;

	shift = (v > 0xffffffffULL) << 5;
	v >>= shift;
	r |= shift;
	shift = (v > 0xffff) << 4;
	v >>= shift;
	r |= shift;
	shift = (v > 0xff) << 3;
	v >>= shift;
	r |= shift;
	shift = (v > 0xf) << 2;
	v >>= shift;
	r |= shift;
	shift = (v > 0x3) << 1;
	v >>= shift;
	r |= shift;
	return r | (__u32)(v >> 1);
}

/* The duration bucket of `ns` (layout in gpuship_events.h). */
static __always_inline __u32 duration_bucket(__u64 ns)
{
	__u32 octave, sub, index;

	if (ns < (1ULL << GPUSHIP_STATS_FIRST_OCTAVE))
		return 0;
	octave = log2_u64(ns);
	sub = (ns >> (octave - GPUSHIP_STATS_SUB_BUCKETS_LOG2)) & ((1 << GPUSHIP_STATS_SUB_BUCKETS_LOG2) - 1);
	index = ((octave - GPUSHIP_STATS_FIRST_OCTAVE) << GPUSHIP_STATS_SUB_BUCKETS_LOG2) + sub + 1;
	return index < GPUSHIP_STATS_BUCKETS ? index : GPUSHIP_STATS_BUCKETS - 1;
}

/* Lowers *slot to `value` (min) or raises it (max) with a few compare-and-swaps; a slot
 * changed by other CPUs between the tries keeps their value, which is as extreme. */
static __always_inline void store_extreme(__u64 *slot, __u64 value, bool lower)
{
	for (int tries = 0; tries < 4; tries++) {
		__u64 seen = *slot;

		if (lower ? seen != 0 && seen <= value : seen >= value)
			return;
		if (__sync_val_compare_and_swap(slot, seen, value) == seen)
			return;
	}
}

/*
 * Adds one call to its (process, function, result) entry of the current generation. `timed`
 * is false for entry-only functions (no duration). Every update is atomic: threads of one
 * process on several CPUs share the entry.
 */
static __always_inline void add_to_stats(const struct cuda_event *ev, __u32 result, bool timed)
{
	struct cuda_stats_key key = {
		.tgid = ev->pid,
		.function_id = ev->function_id,
		.result = result,
		.generation = stats_generation & 1,
	};
	struct cuda_stats_value *value = bpf_map_lookup_elem(&call_stats, &key);
	__u32 bucket;

	if (!value) {
		/* Two CPUs may race to create it: one insert wins, the other finds it. */
		if (bpf_map_update_elem(&call_stats, &key, &empty_stats, BPF_NOEXIST) == 0) {
			value = bpf_map_lookup_elem(&call_stats, &key);
			if (value)
				__builtin_memcpy(value->comm, ev->comm, sizeof(value->comm));
		} else {
			value = bpf_map_lookup_elem(&call_stats, &key);
		}
		if (!value) {
			count(GPUSHIP_STAT_STATS_FULL);
			return;
		}
	}
	__sync_fetch_and_add(&value->calls, 1);
	if (ev->valid & GPUSHIP_ARG_BYTES)
		__sync_fetch_and_add(&value->bytes_sum, ev->bytes);
	if (timed) {
		__sync_fetch_and_add(&value->duration_sum_ns, ev->duration_ns);
		store_extreme(&value->duration_min_ns, ev->duration_ns, true);
		store_extreme(&value->duration_max_ns, ev->duration_ns, false);
		bucket = duration_bucket(ev->duration_ns) & (GPUSHIP_STATS_BUCKETS - 1);
		__sync_fetch_and_add(&value->buckets[bucket], 1);
	}
	count(GPUSHIP_STAT_AGGREGATED);
}

/*
 * Keeps a completed call of a `stats` function in this CPU's ring of the flight recorder, with
 * its register arguments (and its stack-passed launch arguments with recorder_launch_details).
 * The
 * slot is claimed with an atomic add, so a program that preempted another on this CPU writes a
 * different slot; the sequence numbers around the event let the reader skip a slot caught
 * mid-write (gpuship_events.h).
 */
static __always_inline void record_call(struct call_entry *entry)
{
	const struct cuda_event *event = &entry->event;
	__u32 zero = 0, index;
	__u64 *head, seq;
	struct cuda_recorder_slot *slot;

	if (!recorder_enabled)
		return;
	if (recorder_launch_details && entry->deferred_launch)
		complete_deferred(entry);
	head = bpf_map_lookup_elem(&recorder_head, &zero);
	if (!head)
		return;
	seq = __sync_fetch_and_add(head, 1) + 1;
	index = (bpf_get_smp_processor_id() << recorder_shift) |
		((__u32)seq & ((1U << recorder_shift) - 1));
	slot = bpf_map_lookup_elem(&recorder, &index);
	if (!slot)
		return;
	*(volatile __u64 *)&slot->seq_begin = seq;
	asm volatile("" ::: "memory");
	__builtin_memcpy(&slot->event, event, sizeof(*event));
	asm volatile("" ::: "memory");
	*(volatile __u64 *)&slot->seq_end = seq;
}

#endif /* GPUSHIP_CUDA_STATS_MODE_H */
