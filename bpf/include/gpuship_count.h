/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The one way a BPF program here increments a counter of its per-CPU stats array.
 *
 * Per-CPU is not enough on its own: uprobe, fentry and (on current kernels) syscall-tracepoint
 * programs run with migration disabled but, on a preemptible kernel, can be preempted. A plain
 * `*value += 1` preempted between its load and its store writes back a stale value and erases
 * the counts of every program that ran on that CPU meanwhile, which breaks
 * `emitted = received + lost` without a trace. The atomic add costs a few nanoseconds on a cache
 * line no other CPU touches. The agent sums the per-CPU values (agent/accounting.rs).
 *
 * Include after bpf_helpers.h.
 */
#ifndef GPUSHIP_COUNT_H
#define GPUSHIP_COUNT_H

static __always_inline void gpuship_count(void *stats, __u32 slot)
{
	__u64 *value = bpf_map_lookup_elem(stats, &slot);

	if (value)
		__sync_fetch_and_add(value, 1);
}

#endif /* GPUSHIP_COUNT_H */
