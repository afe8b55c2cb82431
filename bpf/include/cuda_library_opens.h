// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#ifndef GPUSHIP_CUDA_LIBRARY_OPENS_H
#define GPUSHIP_CUDA_LIBRARY_OPENS_H

/*
 * Library discovery (agent/sources/cuda/discovery): a process that opens a file whose name
 * starts with "libcuda.so" is about to map a CUDA driver library, perhaps one the probes do
 * not cover yet (a container's own path, a job's own copy). Its tgid and the time of its
 * first such open go to library_opens, which the agent reads on its drain timer; the agent
 * then reads the process's maps and attaches the file if it is new. Only the file name is
 * compared, from its end back to the last '/': a few dozen byte compares per open.
 */
#define LIBRARY_PATH_MAX 256
#define LIBRARY_PREFIX_LEN 10

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u64);
} library_opens SEC(".maps");

/* The path is read into the program's own stack, never into a per-CPU buffer: these programs
 * can be preempted, and another task's open on the same CPU would overwrite a shared one.
 * The prefix compare may read up to LIBRARY_PREFIX_LEN bytes past the masked index. */
static __always_inline int note_library_open(const char *user_path)
{
	static const char prefix[LIBRARY_PREFIX_LEN] = "libcuda.so";
	char path[LIBRARY_PATH_MAX + LIBRARY_PREFIX_LEN] = {};
	__u32 base = 0, tgid;
	__u64 now;
	long len;

	len = bpf_probe_read_user_str(path, LIBRARY_PATH_MAX, user_path);
	/* len counts the NUL: a name shorter than the prefix cannot match. */
	if (len <= LIBRARY_PREFIX_LEN)
		return 0;
	for (__u32 i = 2; i <= LIBRARY_PATH_MAX; i++) {
		long at = len - i;

		if (at < 0)
			break;
		if (path[at & (LIBRARY_PATH_MAX - 1)] == '/') {
			base = at + 1;
			break;
		}
	}
	base &= LIBRARY_PATH_MAX - 1;
	for (int k = 0; k < LIBRARY_PREFIX_LEN; k++)
		if (path[base + k] != prefix[k])
			return 0;
	tgid = bpf_get_current_pid_tgid() >> 32;
	now = bpf_ktime_get_ns();
	bpf_map_update_elem(&library_opens, &tgid, &now, BPF_NOEXIST);
	return 0;
}

SEC("tracepoint/syscalls/sys_enter_openat")
int library_openat(struct trace_event_raw_sys_enter *ctx)
{
	return note_library_open((const char *)ctx->args[1]);
}

SEC("tracepoint/syscalls/sys_enter_openat2")
int library_openat2(struct trace_event_raw_sys_enter *ctx)
{
	return note_library_open((const char *)ctx->args[1]);
}

#endif /* GPUSHIP_CUDA_LIBRARY_OPENS_H */
