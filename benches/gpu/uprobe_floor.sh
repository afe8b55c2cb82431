#!/bin/bash
# What a uprobe (and a uretprobe) costs on this machine before any tracer does any work, beside
# what gpuship adds: the latency of N timed cuLaunchKernel calls of the stand-in libcuda
# (`cuda_workload latency N`) untraced, with kernel trace events (tracefs `p:`/`r:` uprobe
# events, enabled in a private trace instance whose buffer is off, so each hit is the trap and
# an early return), and under gpuship (the defaults: launches in stats mode, entry-only; the same
# with their return probe; every launch a row; blackhole sink).
# Needs no bpftrace, so it runs on the GPU machine. Every mode once per round, rotated; medians.
#
#   FIXTURES=target/gpu/fixtures GPUSHIP=target/gpu/gpuship bash benches/gpu/uprobe_floor.sh [N] [ROUNDS]
#
# GPUSHIP_BEFORE=path/to/older/gpuship adds a mode `before_default`: that build with the defaults,
# in the same rounds, for an A/B of a change to the probes.
# ONLY="MODE ..." runs those modes only. FIXTURES pointing at a folder holding the CET-built
# stand-in (tests/fixtures builds it as cet/libcuda.so.1) measures a library whose functions
# start with endbr64.
#
# Leaves nothing behind: its uprobe events and trace instance are removed on exit, and tracefs
# is unmounted again if it was not mounted.
set -euo pipefail
N=${1:-200000}
ROUNDS=${2:-5}
FX=${FIXTURES:-target/gpu/fixtures}
BIN=${GPUSHIP:-target/gpu/gpuship}
BEFORE=${GPUSHIP_BEFORE:-}
LIB=$(readlink -f "$FX/libcuda.so.1")
TRACEFS=/sys/kernel/tracing
MOUNTED=
if [ ! -e "$TRACEFS/uprobe_events" ]; then
    # Not mounted (some VMs): mount it for the run, unmounted again on exit.
    mount -t tracefs nodev "$TRACEFS"
    MOUNTED=1
fi
INSTANCE=$TRACEFS/instances/gpuship_floor
WORK=$(mktemp -d)

# File offset of cuLaunchKernel: its address in this process minus its mapping's start, plus
# the mapping's file offset.
OFFSET=$(python3 - "$LIB" <<'PY'
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
addr = ctypes.cast(lib.cuLaunchKernel, ctypes.c_void_p).value
for line in open("/proc/self/maps"):
    fields = line.split()
    start, end = (int(x, 16) for x in fields[0].split("-"))
    if start <= addr < end:
        print(hex(addr - start + int(fields[2], 16)))
        break
PY
)

cleanup() {
    [ -n "${AGENT:-}" ] && kill -INT "$AGENT" 2>/dev/null && wait "$AGENT" 2>/dev/null || true
    if [ -d "$INSTANCE" ]; then
        echo 0 > "$INSTANCE/events/gpuship_floor/enable" 2>/dev/null || true
        rmdir "$INSTANCE" 2>/dev/null || true
    fi
    for e in entry ret; do echo "-:gpuship_floor/$e" >> "$TRACEFS/uprobe_events" 2>/dev/null || true; done
    rm -rf "$WORK"
    [ -n "$MOUNTED" ] && umount "$TRACEFS" || true
}
trap cleanup EXIT

latency() {
    CUDA_LIB=$LIB "$FX/cuda_workload" latency "$N" |
        sed -n 's/.*p50_ns=\([0-9]*\) p99_ns=\([0-9]*\).*/\1 \2/p'
}

floor_on() { # entry | entry_return
    echo "p:gpuship_floor/entry $LIB:$OFFSET" >> "$TRACEFS/uprobe_events"
    [ "$1" = entry_return ] && echo "r:gpuship_floor/ret $LIB:$OFFSET" >> "$TRACEFS/uprobe_events"
    mkdir "$INSTANCE"
    echo 0 > "$INSTANCE/tracing_on"
    echo 1 > "$INSTANCE/events/gpuship_floor/enable"
}

floor_off() {
    echo 0 > "$INSTANCE/events/gpuship_floor/enable"
    rmdir "$INSTANCE"
    for e in entry ret; do echo "-:gpuship_floor/$e" >> "$TRACEFS/uprobe_events" 2>/dev/null || true; done
}

gpuship_on() { # default (launches in stats mode, entry-only) | stats_return (with their return) | rows; [binary]
    local stats_entry_only='["cuLaunchKernel*"]' stats='["cuLaunchKernel*", "cuMemcpyAsync*", "cuGraphLaunch*"]'
    [ "$1" = stats_return ] && stats_entry_only='[]'
    [ "$1" = rows ] && stats='[]'
    cat > "$WORK/floor.toml" <<TOML
[agent]
progress_interval_secs = 0
state_dir = "$WORK/state"
[metrics]
enabled = false
[sources.xid]
tracepoint = false
kmsg = false
[sources.driver]
ioctl = false
[sources.cuda]
libraries = ["$LIB"]
functions = ["default"]
stats = $stats
stats_entry_only = $stats_entry_only
[[sinks]]
type = "blackhole"
TOML
    "${2:-$BIN}" run --config "$WORK/floor.toml" 2> "$WORK/agent.log" &
    AGENT=$!
    for _ in $(seq 1 300); do grep -q "capture started" "$WORK/agent.log" && return; sleep 0.1; done
    echo "gpuship did not start:"; cat "$WORK/agent.log"; exit 1
}

gpuship_off() { kill -INT "$AGENT"; wait "$AGENT" || true; AGENT=; }

MODES=(untraced floor_entry floor_entry_return gpuship_default gpuship_stats_return gpuship_rows)
[ -n "$BEFORE" ] && MODES+=(before_default)
# ONLY="untraced gpuship_default ..." runs those modes only.
[ -n "${ONLY:-}" ] && read -ra MODES <<<"$ONLY"
declare -A P50 P99
for ((round = 0; round < ROUNDS; round++)); do
    for ((i = 0; i < ${#MODES[@]}; i++)); do
        mode=${MODES[$(((round + i) % ${#MODES[@]}))]}
        case $mode in
            untraced) result=$(latency) ;;
            floor_entry) floor_on entry; result=$(latency); floor_off ;;
            floor_entry_return) floor_on entry_return; result=$(latency); floor_off ;;
            gpuship_stats_return) gpuship_on stats_return; result=$(latency); gpuship_off ;;
            gpuship_default) gpuship_on default; result=$(latency); gpuship_off ;;
            gpuship_rows) gpuship_on rows; result=$(latency); gpuship_off ;;
            before_default) gpuship_on default "$BEFORE"; result=$(latency); gpuship_off ;;
        esac
        P50[$mode]+="${result% *} "
        P99[$mode]+="${result#* } "
    done
done

median() { tr ' ' '\n' | grep . | sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
echo "uprobe floor on $(uname -r), $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "$N timed cuLaunchKernel calls per run, median of $ROUNDS rounds"
base=$(echo "${P50[untraced]}" | median)
printf '| %s | %s | %s | %s | %s |\n' mode "p50 ns" "added p50 ns" "p99 ns" "each round's p50 ns"
printf '| --- | --- | --- | --- | --- |\n'
for mode in "${MODES[@]}"; do
    p50=$(echo "${P50[$mode]}" | median)
    p99=$(echo "${P99[$mode]}" | median)
    printf '| %s | %s | %s | %s | %s |\n' "$mode" "$p50" "$((p50 - base))" "$p99" "${P50[$mode]% }"
done
