/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The kernel's half of the overhead budget (agent/sources/cuda/budget): what each process's
 * probed calls cost it, in traps, and which set of hot links records a hot call.
 *
 * Every probed call adds its traps (1 at entry, 2 with a return probe) to its process's
 * process_traps entry: `hot` for the functions the budget samples (cookie bit
 * GPUSHIP_COOKIE_HOT_SHIFT), `steady` for the others. The agent reads the table on its drain
 * timer to estimate each process's cost and choose how much of the time its hot functions
 * stay probed.
 *
 * Hot functions are attached either system-wide (every process, exact: hot_mode 0) or per
 * process through pid-filtered links (hot_mode 1, only then can a process be probed part of the
 * time). While the agent switches, both sets are attached for a moment; a call trips one
 * breakpoint whatever the number of links on it, and only the links of the current mode record
 * it, so the switch neither loses nor doubles a call. It defines maps, so only cuda.bpf.c
 * includes it.
 */
#ifndef GPUSHIP_CUDA_BUDGET_H
#define GPUSHIP_CUDA_BUDGET_H

/* Set by the agent when the budget is on: every recorded call counts its traps. */
const volatile bool count_process_traps = false;

struct process_traps {
	__u64 hot;
	__u64 steady;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct process_traps);
} process_traps SEC(".maps");

/* 0: the system-wide hot links record hot calls; 1: the per-process ones do. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} hot_mode SEC(".maps");

/* Makes the value visible to libbpf-cargo: the agent reads process_traps. */
struct process_traps process_traps_layout = {};

/* True when this link's call is to be recorded: any cold call, and a hot call through a link
 * of the current mode. */
static __always_inline bool link_records(__u64 cookie)
{
	__u32 zero = 0, *mode;

	if (!((cookie >> GPUSHIP_COOKIE_HOT_SHIFT) & 1))
		return true;
	mode = bpf_map_lookup_elem(&hot_mode, &zero);
	return mode && *mode == ((cookie >> GPUSHIP_COOKIE_PER_PROCESS_SHIFT) & 1);
}

/* Adds a recorded call's traps to its process's cost. */
static __always_inline void count_traps(__u32 tgid, __u64 cookie, bool with_return)
{
	struct process_traps fresh = {}, *traps = bpf_map_lookup_elem(&process_traps, &tgid);
	__u64 n = with_return ? 2 : 1;

	if (!traps) {
		bpf_map_update_elem(&process_traps, &tgid, &fresh, BPF_NOEXIST);
		traps = bpf_map_lookup_elem(&process_traps, &tgid);
		if (!traps)
			return;
	}
	if ((cookie >> GPUSHIP_COOKIE_HOT_SHIFT) & 1)
		__sync_fetch_and_add(&traps->hot, n);
	else
		__sync_fetch_and_add(&traps->steady, n);
}

/*
 * The node's trap cost, measured by the agent on itself: it attaches this program to one of its
 * own functions (pid-filtered), calls it many times with and without, and takes the difference.
 * The program does what a hot entry costs beyond the trap in maps: a lookup and two atomic adds.
 */
SEC("uprobe.multi")
int trap_calibration(struct pt_regs *ctx)
{
	count_traps(bpf_get_current_pid_tgid() >> 32, bpf_get_attach_cookie(ctx), false);
	return 0;
}

#endif /* GPUSHIP_CUDA_BUDGET_H */
