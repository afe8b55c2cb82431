/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The calling thread's name for every record, read straight from its task_struct.
 *
 * bpf_get_current_comm() copies the name byte by byte through a helper call; a hot CUDA call
 * pays that on every probe. The name is a 16-byte array in the task (TASK_COMM_LEN), so two
 * 8-byte loads through the task's BTF pointer copy it (CO-RE places the field; the verifier
 * allows loads anywhere inside a scalar array). Like the helper, it takes no lock: a thread
 * renamed at this instant may read partly old, as /proc/<pid>/comm can. The kernel keeps the
 * array NUL-terminated and padded when it sets a name (__set_task_comm -> strscpy_pad).
 *
 * Include after vmlinux.h and bpf_helpers.h.
 */
#ifndef GPUSHIP_THREAD_H
#define GPUSHIP_THREAD_H

_Static_assert(GPUSHIP_COMM_LEN == 16, "the name is copied as two 8-byte words");

static __always_inline void gpuship_thread_name(char *name)
{
	struct task_struct *task = bpf_get_current_task_btf();
	const __u64 *from = (const __u64 *)task->comm;
	__u64 words[2];

	words[0] = from[0];
	words[1] = from[1];
	__builtin_memcpy(name, words, sizeof(words));
}

#endif /* GPUSHIP_THREAD_H */
