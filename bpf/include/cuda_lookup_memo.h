/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Which kernel lookups each thread has already answered, so that a repeat is counted at entry
 * and its return probe skipped (a `uprobe.session` program tells the kernel so), included by
 * bpf/cuda.bpf.c once, after its maps and cuda_stats_mode.h.
 *
 * The CUDA runtime asks cuKernelGetFunction for the same kernels on every training step. The
 * answer (the CUfunction) depends on the kernel and on the calling thread's current context,
 * so a thread that asked for a kernel in its current context before gets the same answer
 * again. Each thread keeps a direct-mapped table of the kernels it asked for (256 slots, 4 KiB)
 * in task storage (freed with the thread, never shared, so a reused tid starts empty), with
 * two stamps:
 * - the thread's generation, bumped when this thread changes its current context (cookie bit
 *   GPUSHIP_COOKIE_THREAD_CONTEXT) or execs;
 * - the node's answer epoch, bumped when any thread may change every thread's answers (a
 *   context destroyed, a primary context released or reset, a library or module unloaded:
 *   GPUSHIP_COOKIE_ALL_ANSWERS), and when any call fails with an error after which the context
 *   is unusable, so that the lookups that then fail are seen (a process failing every call
 *   that way makes every thread on the node probe its lookups again: slower, never wrong).
 * A lookup whose kernel, generation and epoch all match, with a non-NULL out pointer, is a
 * repeat. Both stamps are taken at the lookup's entry and written with its answer at return,
 * so a change that races with the call makes its answer stale rather than trusted. A table
 * slot shared by two kernels only costs a probed return. The agent turns this on only when
 * every exported function that changes answers is probed.
 */
#ifndef GPUSHIP_CUDA_LOOKUP_MEMO_H
#define GPUSHIP_CUDA_LOOKUP_MEMO_H

/* Set by the agent: repeats are counted at entry (the session program is attached). */
const volatile bool repeat_lookups_at_entry = false;

/* Bumped by any call that may change every thread's answers (see above). */
volatile __u32 answer_epoch = 0;

#define LOOKUP_MEMO_WAYS 256

struct answered_lookup {
	__u64 kernel;
	__u32 epoch;
	__u32 generation;
};

struct lookup_memo {
	__u64 exec_id;     /* the task's self_exec_id when the table was last reset */
	__u32 generation;  /* bumped on this thread's context changes and on exec */
	__u32 _pad;
	struct answered_lookup ways[LOOKUP_MEMO_WAYS];
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct lookup_memo);
} lookup_memos SEC(".maps");

static __always_inline __u32 memo_way(__u64 kernel)
{
	return (__u32)((kernel >> 4) ^ (kernel >> 12)) & (LOOKUP_MEMO_WAYS - 1);
}

/*
 * Takes the stamp (epoch << 32 | generation) that a lookup of `kernel` entering now carries to
 * its return, and says whether this thread already answered that kernel under it. Creates the
 * thread's table, and resets it after an exec (a new program's handles may repeat the old
 * one's values). The stamp is 0, never remembered, when the table cannot be had.
 */
static __always_inline bool lookup_is_repeat(__u64 kernel, __u64 *stamp)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct lookup_memo *memo;
	struct answered_lookup *way;
	__u32 epoch = answer_epoch;

	*stamp = 0;
	memo = bpf_task_storage_get(&lookup_memos, task, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!memo)
		return false;
	if (memo->exec_id != task->self_exec_id) {
		memo->exec_id = task->self_exec_id;
		memo->generation++;
	}
	/* Generation 0 is never stamped: empty ways hold it. */
	if (memo->generation == 0)
		memo->generation = 1;
	*stamp = ((__u64)epoch << 32) | memo->generation;
	way = &memo->ways[memo_way(kernel)];
	return way->kernel == kernel && way->epoch == epoch && way->generation == memo->generation;
}

/* Remembers a successful lookup of `kernel` whose answer was delivered (a row, or a repeat of
 * an answer already sent), under the stamp taken at its entry. */
static __always_inline void remember_lookup(__u64 kernel, __u64 stamp)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct lookup_memo *memo = bpf_task_storage_get(&lookup_memos, task, 0, 0);
	struct answered_lookup *way;

	if (!memo || stamp == 0 || memo->exec_id != task->self_exec_id)
		return;
	way = &memo->ways[memo_way(kernel)];
	way->kernel = kernel;
	way->epoch = (__u32)(stamp >> 32);
	way->generation = (__u32)stamp;
}

/* Entry of any probed call: what it changes for the lookups answered so far. */
static __always_inline void invalidate_lookups(__u64 cookie)
{
	struct lookup_memo *memo;

	if (!repeat_lookups_at_entry)
		return;
	if ((cookie >> GPUSHIP_COOKIE_ALL_ANSWERS_SHIFT) & 1)
		__sync_fetch_and_add(&answer_epoch, 1);
	if ((cookie >> GPUSHIP_COOKIE_THREAD_CONTEXT_SHIFT) & 1) {
		memo = bpf_task_storage_get(&lookup_memos, bpf_get_current_task_btf(), 0, 0);
		if (memo)
			memo->generation++;
	}
}

/* Return of any probed call: a result after which the context is unusable (the agent's
 * recorder::is_sticky) makes every thread ask again, so that failing lookups are seen. */
static __always_inline void invalidate_on_failure(__u32 result)
{
	if (!repeat_lookups_at_entry)
		return;
	switch (result) {
	case 700: case 701: case 702: case 714: case 715: case 716: case 717: case 718: case 719:
	case 999:
		__sync_fetch_and_add(&answer_epoch, 1);
	}
}

#endif /* GPUSHIP_CUDA_LOOKUP_MEMO_H */
