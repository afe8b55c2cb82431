#!/usr/bin/env bash
# What a uprobe costs by the instruction it sits on: the kernel emulates some instructions at
# the breakpoint (push, nop, jmp, call) and single-steps every other one out of line, which
# costs a second trap (a debug exception; in a VM, a round trip through the hypervisor).
#
#   make -s -C benches/gpu/single_step OUT=$PWD/target/gpu/single_step
#   SS=target/gpu/single_step benches/gpu/single_step.sh [CALLS] [ROUNDS]
#
# For each function of libprobe_sites.so (its first instruction in its name), and for f_endbr
# probed past its endbr64 (+4, on the push): ns per call untraced and with a tracefs uprobe
# event on it, ROUNDS rounds in rotated order. Then, with LIBCUDA set (default: the driver's
# libcuda.so.1), the first bytes of the functions gpuship probes by default.
set -euo pipefail
SS=${SS:-target/gpu/single_step}
CALLS=${1:-200000}
ROUNDS=${2:-3}
HERE=$(dirname "$0")
LIB=$(readlink -f "$SS/libprobe_sites.so")
TRACEFS=/sys/kernel/tracing
MOUNTED=
if [ ! -e "$TRACEFS/uprobe_events" ]; then
	mount -t tracefs nodev "$TRACEFS"
	MOUNTED=1
fi
INSTANCE=$TRACEFS/instances/gpuship_ss
probe_off() {
	[ -d "$INSTANCE" ] && { echo 0 >"$INSTANCE/events/gpuship_ss/enable" 2>/dev/null || true; rmdir "$INSTANCE" 2>/dev/null || true; }
	echo "-:gpuship_ss/site" >>"$TRACEFS/uprobe_events" 2>/dev/null || true
}
cleanup() { probe_off; [ -n "$MOUNTED" ] && umount "$TRACEFS" || true; }
trap cleanup EXIT
probe_on() { # offset
	echo "p:gpuship_ss/site $LIB:$1" >>"$TRACEFS/uprobe_events"
	mkdir "$INSTANCE"
	echo 0 >"$INSTANCE/tracing_on"
	echo 1 >"$INSTANCE/events/gpuship_ss/enable"
}
offset() { awk -v f="$1" '$1 == f { print $2 }' "$SS/offsets.txt"; }
SITES=(f_push f_nop f_nop5 f_endbr f_endbr+4 f_mov f_sub f_movrsp)
declare -A UNTRACED TRACED
for round in $(seq 1 "$ROUNDS"); do
	n=${#SITES[@]}
	for i in $(seq 0 $((n - 1))); do
		site=${SITES[$(((i + round) % n))]}
		fn=${site%+4}
		off=$(offset "$fn")
		[ "$site" != "$fn" ] && off=$(printf '0x%x' $((off + 4)))
		UNTRACED[$site]+="$("$SS/time_calls" "$fn" "$CALLS") "
		probe_on "$off"
		TRACED[$site]+="$("$SS/time_calls" "$fn" "$CALLS") "
		probe_off
	done
done
echo "| probe site | untraced ns/call | with a uprobe, ns/call (each round) |"
for site in "${SITES[@]}"; do
	echo "| $site | ${UNTRACED[$site]}| ${TRACED[$site]}|"
done
LIBCUDA=${LIBCUDA:-/usr/local/nvidia/lib64/libcuda.so.1}
if [ -e "$LIBCUDA" ]; then
	echo "== first bytes of the functions probed by default"
	python3 "$HERE/entry_instructions.py" "$LIBCUDA" 'cuLaunch*' cuKernelGetFunction cuLibraryGetKernel \
		cuModuleGetFunction 'cuMemcpy*' 'cuGraphLaunch*' 'cuMemAlloc*' 'cuMemFree*' 'cuMemCreate' 'cuMemMap' \
		'cuCtxSynchronize*' 'cuStreamSynchronize*' 'cuEventSynchronize*' cuCtxSetCurrent cuInit \
		cuDevicePrimaryCtxRetain cuDeviceGetUuid 'cuLibraryLoad*' 'cuModuleLoad*' 'cuMemsetD*'
fi
