/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Which kernel lookups each thread has already answered, so that a repeat is counted at entry
 * and its return probe skipped (a `uprobe.session` program tells the kernel so), included by
 * bpf/cuda.bpf.c once, after its maps and cuda_stats_mode.h.
 *
 * The CUDA runtime asks cuKernelGetFunction for the same kernels on every training step. The
 * answer (the CUfunction) depends on the kernel and on the calling thread's current context,
 * so a thread that asked for a kernel in its current context before gets the same answer
 * again. Each thread keeps a direct-mapped table of the kernels it asked for (256 slots of 24
 * bytes, in an 8 KiB allocation) in task storage (freed with the thread, never shared, so a
 * reused tid starts empty), with two stamps:
 * - the thread's generation, bumped when this thread changes its current context (cookie bit
 *   GPUSHIP_COOKIE_THREAD_CONTEXT, at entry: the thread is inside that call until it is done)
 *   or execs;
 * - the node's answer epoch, bumped at the entry and again at the return of any call that may
 *   change every thread's answers (a context destroyed, a primary context released or reset,
 *   a library or module unloaded: GPUSHIP_COOKIE_ALL_ANSWERS), so that a lookup another thread
 *   answers while such a call runs is not trusted after it; and at the return of any call that
 *   failed (CUDA_ERROR_NOT_READY aside), so that lookups failing after a context broke are seen
 *   (a process failing call after call makes every thread on the node probe its lookups again:
 *   slower, never wrong).
 * A lookup whose kernel, generation and epoch all match, with a non-NULL out pointer, is a
 * repeat. Both stamps are taken at the lookup's entry, kept in its call entry, and written
 * with its answer at return, so a change racing with the call leaves a stale slot rather than
 * a trusted one. The epoch is 64 bits (never wraps); a generation wraps after 2^32 context
 * changes of one thread. A slot shared by two kernels only costs a probed return. The agent
 * turns this on only when every exported function that changes answers is probed (the
 * all-threads ones with their return).
 */
#ifndef GPUSHIP_CUDA_LOOKUP_MEMO_H
#define GPUSHIP_CUDA_LOOKUP_MEMO_H

/* Set by the agent: repeats are counted at entry (the session program is attached). */
const volatile bool repeat_lookups_at_entry = false;

/* Bumped by any call that may change every thread's answers (see above). */
volatile __u64 answer_epoch = 0;

#define LOOKUP_MEMO_WAYS 256

struct answered_lookup {
	__u64 kernel;
	__u64 epoch;
	__u32 generation;
	__u32 _pad;
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

/* A lookup's entry, for on_entry(): a repeat (counted there, its return skipped), or the
 * stamps its return remembers the answer under. */
struct lookup_stamp {
	__u64 epoch;
	__u32 generation;
	bool repeat;
};

/* CUDA_ERROR_NOT_READY: an asynchronous query's "not yet", not a failure. */
#define GPUSHIP_CUDA_ERROR_NOT_READY 600

static __always_inline __u32 memo_way(__u64 kernel)
{
	return (__u32)((kernel >> 4) ^ (kernel >> 12)) & (LOOKUP_MEMO_WAYS - 1);
}

/*
 * Takes the stamps a lookup of `kernel` entering now keeps until its return (*epoch and
 * *generation), and says whether this thread already answered that kernel under them. Creates
 * the thread's table, and resets it after an exec (a new program's handles may repeat the old
 * one's values). *generation is 0, never remembered, when the table cannot be had.
 */
static __always_inline bool lookup_is_repeat(__u64 kernel, __u64 *epoch, __u32 *generation)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct lookup_memo *memo;
	struct answered_lookup *way;

	*epoch = answer_epoch;
	*generation = 0;
	memo = bpf_task_storage_get(&lookup_memos, task, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!memo)
		return false;
	if (memo->exec_id != task->self_exec_id) {
		memo->exec_id = task->self_exec_id;
		memo->generation++;
	}
	/* Generation 0 is never stamped: empty slots hold it. */
	if (memo->generation == 0)
		memo->generation = 1;
	*generation = memo->generation;
	way = &memo->ways[memo_way(kernel)];
	return way->kernel == kernel && way->epoch == *epoch && way->generation == *generation;
}

/* Remembers a successful lookup of `kernel` whose answer was delivered (a row, or a repeat of
 * an answer already sent), under the stamps taken at its entry. */
static __always_inline void remember_lookup(__u64 kernel, __u64 epoch, __u32 generation)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct lookup_memo *memo = bpf_task_storage_get(&lookup_memos, task, 0, 0);
	struct answered_lookup *way;

	if (!memo || generation == 0 || memo->exec_id != task->self_exec_id)
		return;
	way = &memo->ways[memo_way(kernel)];
	way->kernel = kernel;
	way->epoch = epoch;
	way->generation = generation;
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

/* Return of any probed call: an all-threads change is done now, and a failure may mean a
 * broken context; either makes every thread ask again. */
static __always_inline void invalidate_after(__u64 cookie, __u32 result)
{
	if (!repeat_lookups_at_entry)
		return;
	if (((cookie >> GPUSHIP_COOKIE_ALL_ANSWERS_SHIFT) & 1) ||
	    (result != 0 && result != GPUSHIP_CUDA_ERROR_NOT_READY))
		__sync_fetch_and_add(&answer_epoch, 1);
}

#endif /* GPUSHIP_CUDA_LOOKUP_MEMO_H */
