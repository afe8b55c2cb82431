/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Where a CUDA call waits between its entry and its return, for bpf/cuda.bpf.c, included by it
 * once, after its counters: the call entry (the decoded call and what its return still needs),
 * the calling thread's slot in an array (claimed with one compare-and-swap, released with one
 * exchange), and the hash table that takes a call whose slot is busy. It defines maps and
 * globals, so only cuda.bpf.c includes it.
 */
#ifndef GPUSHIP_CUDA_CALL_SLOTS_H
#define GPUSHIP_CUDA_CALL_SLOTS_H

struct call_key {
	__u32 tid;
	__u32 function_id;
};

struct call_entry {
	struct cuda_event event;
	__u64 out_ptr; /* user address of the device pointer an allocation writes, or 0 */
	/* A `stats` call's arguments left in user memory until it is known to need them: the
	 * stack pointer at entry (cuLaunchKernel) or the CUlaunchConfig (cuLaunchKernelEx). */
	__u64 deferred_args;
	__u32 deferred_launch; /* GPUSHIP_LAUNCH_* still to decode from deferred_args, or 0 */
	/* A lookup under the session program: the stamps taken at its entry, remembered with its
	 * answer at return (cuda_lookup_memo.h); generation 0 for every other call. */
	__u32 lookup_generation;
	__u64 lookup_epoch;
	__u64 name_ptr; /* user address of the name the call takes (read at return), or 0 */
};

/*
 * Calls between entry and return. A plain hash, not LRU: LRU maps evict live entries under
 * churn (their free lists are per CPU), which loses the return of a call in progress. A thread
 * killed mid-call leaves one stale entry, overwritten when its tid is reused; a full table is
 * counted (GPUSHIP_STAT_INFLIGHT_FULL), never silent.
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct call_key);
	__type(value, struct call_entry);
} inflight SEC(".maps");

/* The per-thread fast path for calls in flight. `owner` is (tid << 32 | function_id) of the call
 * holding the slot, 0 when free; tid 0 is never a user thread. A thread killed mid-call leaves
 * its slot held until its tid calls that function again; calls of other threads mapping to that
 * slot meanwhile take the hash table, which is slower, never lossy. */
#define CALL_SLOTS 16384 /* the default; the agent sizes the map and sets the mask */
const volatile __u32 call_slot_mask = CALL_SLOTS - 1;

struct call_slot {
	__u64 owner;
	struct call_entry entry;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, CALL_SLOTS);
	__type(key, __u32);
	__type(value, struct call_slot);
} call_slots SEC(".maps");

static __always_inline __u64 slot_owner(__u64 pid_tgid, __u64 cookie)
{
	return ((pid_tgid & 0xffffffff) << 32) | (cookie & GPUSHIP_COOKIE_FUNCTION_MASK);
}

/* The calling thread's slot if it holds it for this function now, or if it could claim it. */
static __always_inline struct call_slot *claim_slot(__u64 owner)
{
	__u32 index = (__u32)(owner >> 32) & call_slot_mask;
	struct call_slot *slot = bpf_map_lookup_elem(&call_slots, &index);
	__u64 previous;

	if (!slot)
		return NULL;
	previous = __sync_val_compare_and_swap(&slot->owner, 0, owner);
	return previous == 0 || previous == owner ? slot : NULL;
}

/* The calling thread's slot if it holds it for this function. */
static __always_inline struct call_slot *held_slot(__u64 owner)
{
	__u32 index = (__u32)(owner >> 32) & call_slot_mask;
	struct call_slot *slot = bpf_map_lookup_elem(&call_slots, &index);

	return slot && slot->owner == owner ? slot : NULL;
}

/* Frees where a completed call was kept: its slot, or its hash-table entry. */
static __always_inline void release(struct call_slot *slot, struct call_key *key)
{
	if (slot)
		__sync_lock_test_and_set(&slot->owner, 0);
	else
		bpf_map_delete_elem(&inflight, key);
}

#endif /* GPUSHIP_CUDA_CALL_SLOTS_H */
