/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Decoding a CUDA call's arguments for bpf/cuda.bpf.c, included by it once, after its call
 * entry and slot types: the register arguments the attach cookie points at, launch geometry
 * (registers, the stack, a CUlaunchConfig), and what a `stats` call defers to its return.
 */
#ifndef GPUSHIP_CUDA_ARGUMENTS_H
#define GPUSHIP_CUDA_ARGUMENTS_H

/* The first six integer arguments. Read with constant offsets: the verifier rejects a ctx
 * access at a computed offset, so arg_at() indexes this copy instead. */
struct call_args {
	__u64 value[6];
};

static __always_inline void read_args(struct pt_regs *ctx, struct call_args *args)
{
	args->value[0] = PT_REGS_PARM1(ctx);
	args->value[1] = PT_REGS_PARM2(ctx);
	args->value[2] = PT_REGS_PARM3(ctx);
	args->value[3] = PT_REGS_PARM4(ctx);
	args->value[4] = PT_REGS_PARM5(ctx);
	args->value[5] = PT_REGS_PARM6(ctx);
}

static __always_inline __u64 arg_at(const struct call_args *args, __u32 index)
{
	if (index >= 6)
		return 0;
	return args->value[index];
}

static __always_inline __u32 cookie_field(__u64 cookie, __u32 shift)
{
	return (cookie >> shift) & GPUSHIP_COOKIE_NONE;
}

static __always_inline __u32 cookie_function(__u64 cookie)
{
	return cookie & GPUSHIP_COOKIE_FUNCTION_MASK;
}

/* cuLaunchKernel: gx..by are arguments 2..6, in registers. */
static __always_inline void decode_launch_registers(struct pt_regs *ctx, struct cuda_event *ev)
{
	ev->grid[0] = (__u32)PT_REGS_PARM2(ctx);
	ev->grid[1] = (__u32)PT_REGS_PARM3(ctx);
	ev->grid[2] = (__u32)PT_REGS_PARM4(ctx);
	ev->block[0] = (__u32)PT_REGS_PARM5(ctx);
	ev->block[1] = (__u32)PT_REGS_PARM6(ctx);
	ev->valid |= GPUSHIP_ARG_GRID;
}

/* cuLaunchKernel's bz, sharedMemBytes and hStream, the 7th to 9th arguments, on the stack at
 * `args` (the stack pointer at entry + 8: at the first instruction [sp] is the return
 * address). The caller's argument area is still there when the call returns. */
static __always_inline void decode_launch_stack(__u64 args, struct cuda_event *ev)
{
	__u64 stack_args[3];

	if (bpf_probe_read_user(stack_args, sizeof(stack_args), (void *)args) < 0)
		return;
	ev->block[2] = (__u32)stack_args[0];
	ev->shared_mem_bytes = (__u32)stack_args[1];
	ev->stream = stack_args[2];
	ev->valid |= GPUSHIP_ARG_LAUNCH | GPUSHIP_ARG_STREAM;
}

/* The leading fields of CUlaunchConfig, the first argument of cuLaunchKernelEx. */
struct launch_config_head {
	__u32 grid[3];
	__u32 block[3];
	__u32 shared_mem_bytes;
	__u32 _pad;
	__u64 stream;
};

static __always_inline void decode_launch_config(__u64 config_ptr, struct cuda_event *ev)
{
	struct launch_config_head config;

	if (bpf_probe_read_user(&config, sizeof(config), (void *)config_ptr) < 0)
		return;
	ev->grid[0] = config.grid[0];
	ev->grid[1] = config.grid[1];
	ev->grid[2] = config.grid[2];
	ev->block[0] = config.block[0];
	ev->block[1] = config.block[1];
	ev->block[2] = config.block[2];
	ev->shared_mem_bytes = config.shared_mem_bytes;
	ev->stream = config.stream;
	ev->valid |= GPUSHIP_ARG_LAUNCH | GPUSHIP_ARG_STREAM;
}

/* Decodes the launch arguments fill_entry() left in user memory; on the calling thread, at
 * entry or at return. */
static __always_inline void complete_deferred(struct call_entry *entry)
{
	struct cuda_event *ev = &entry->event;

	switch (entry->deferred_launch) {
	case GPUSHIP_LAUNCH_KERNEL:
		decode_launch_stack(entry->deferred_args, ev);
		break;
	case GPUSHIP_LAUNCH_KERNEL_EX:
		decode_launch_config(entry->deferred_args, ev);
		break;
	}
	entry->deferred_launch = 0;
}

/*
 * Fills `entry` (zeroed first) with the call's identity, decoded arguments and start time. A
 * `stats` call (`lean`) takes only what is in registers: most of its calls become no row, so
 * what needs a user-memory read (stack-passed launch arguments, a CUlaunchConfig) waits in
 * `entry` for complete_deferred(), which only calls that become rows (or flight-recorder
 * slots, with recorder_launch_details) pay for.
 */
static __always_inline void fill_entry(struct pt_regs *ctx, struct call_entry *entry, __u64 pid_tgid,
				       __u64 cookie, bool lean)
{
	struct cuda_event *ev = &entry->event;
	struct call_args args;
	__u32 index;

	read_args(ctx, &args);
	__builtin_memset(entry, 0, sizeof(*entry));
	ev->record_kind = GPUSHIP_RECORD_CUDA;
	ev->function_id = cookie_function(cookie);
	ev->pid = pid_tgid >> 32;
	ev->tid = (__u32)pid_tgid;

	index = cookie_field(cookie, GPUSHIP_COOKIE_BYTES_SHIFT);
	if (index != GPUSHIP_COOKIE_NONE) {
		ev->bytes = arg_at(&args, index);
		ev->valid |= GPUSHIP_ARG_BYTES;
	}
	index = cookie_field(cookie, GPUSHIP_COOKIE_DEVICE_PTR_SHIFT);
	if (index != GPUSHIP_COOKIE_NONE) {
		ev->device_ptr = arg_at(&args, index);
		ev->valid |= GPUSHIP_ARG_DEVICE_PTR;
	}
	index = cookie_field(cookie, GPUSHIP_COOKIE_OUT_PTR_SHIFT);
	if (index != GPUSHIP_COOKIE_NONE)
		entry->out_ptr = arg_at(&args, index);
	index = cookie_field(cookie, GPUSHIP_COOKIE_STREAM_SHIFT);
	if (index != GPUSHIP_COOKIE_NONE) {
		ev->stream = arg_at(&args, index);
		ev->valid |= GPUSHIP_ARG_STREAM;
	}
	index = cookie_field(cookie, GPUSHIP_COOKIE_HANDLE_SHIFT);
	if (index != GPUSHIP_COOKIE_NONE) {
		ev->handle = arg_at(&args, index);
		ev->valid |= GPUSHIP_ARG_HANDLE;
	}
	index = cookie_field(cookie, GPUSHIP_COOKIE_PARENT_SHIFT);
	if (index != GPUSHIP_COOKIE_NONE) {
		ev->parent_handle = arg_at(&args, index);
		ev->valid |= GPUSHIP_ARG_PARENT_HANDLE;
	}
	index = cookie_field(cookie, GPUSHIP_COOKIE_NAME_SHIFT);
	if (index != GPUSHIP_COOKIE_NONE)
		entry->name_ptr = arg_at(&args, index);
	switch (cookie_field(cookie, GPUSHIP_COOKIE_LAUNCH_SHIFT)) {
	case GPUSHIP_LAUNCH_KERNEL:
		decode_launch_registers(ctx, ev);
#if defined(__TARGET_ARCH_x86)
		entry->deferred_args = PT_REGS_SP(ctx) + 8;
		entry->deferred_launch = GPUSHIP_LAUNCH_KERNEL;
#endif
		break;
	case GPUSHIP_LAUNCH_KERNEL_EX:
		entry->deferred_args = PT_REGS_PARM1(ctx);
		entry->deferred_launch = GPUSHIP_LAUNCH_KERNEL_EX;
		break;
	}
	if (!lean)
		complete_deferred(entry);
	gpuship_thread_name(ev->comm);
	/* Taken last so that argument decoding is not part of the measured duration. */
	ev->start_boot_ns = bpf_ktime_get_boot_ns();
}

#endif /* GPUSHIP_CUDA_ARGUMENTS_H */
