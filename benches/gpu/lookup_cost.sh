#!/usr/bin/env bash
# What a probed cuKernelGetFunction and cuLaunchKernel cost the calling thread on the real
# libcuda (benches/gpu/lookup_cost.py: thread CPU per call in a tight loop), in rotated rounds:
#   off          nothing attached
#   floor        the kernel's own uprobe events (tracefs, stopped instance): an entry and a
#                return on cuKernelGetFunction, an entry on cuLaunchKernel; no BPF program
#   gpuship      the agent's defaults (lookups in stats mode, repeats counted at entry)
#   no_skip      the same with repeat_lookups_at_entry = false (every lookup keeps its return)
# Run on the GPU machine from the repo root with a carried binary:
#   GPUSHIP=target/gpu/gpuship bash benches/gpu/lookup_cost.sh [CALLS] [ROUNDS]
# Leaves nothing behind (trace events and instance removed, agents stopped by pid).
set -uo pipefail
CALLS=${1:-200000}
ROUNDS=${2:-3}
GPUSHIP=${GPUSHIP:-target/gpu/gpuship}
HERE=$(dirname "$0")
WORK=$(mktemp -d)
# LIBCUDA (default the driver's) is the library the floor's events go on; set, it is also the
# only one the agent probes (a stand-in: put its folder on LD_LIBRARY_PATH too).
LIBRARIES=${LIBCUDA:+libraries = [\"$(readlink -f "$LIBCUDA")\"]}
LIBCUDA=$(readlink -f "${LIBCUDA:-/usr/local/nvidia/lib64/libcuda.so.1}")
TRACEFS=/sys/kernel/tracing
INSTANCE=$TRACEFS/instances/gpuship_lookup_floor
[ -e "$TRACEFS/uprobe_events" ] || mount -t tracefs nodev "$TRACEFS"
for skip in true false; do
	cat >"$WORK/$skip.toml" <<TOML
[agent]
state_dir = "$WORK/state-$skip"
[sources.cuda]
repeat_lookups_at_entry = $skip
$LIBRARIES
[[sinks]]
type = "blackhole"
TOML
done
. "$HERE/agent.sh"
AGENT=
cleanup() {
	[ -n "$AGENT" ] && agent_stop
	[ -d "$INSTANCE" ] && { echo 0 >"$INSTANCE/events/gpuship_lookup_floor/enable"; rmdir "$INSTANCE"; }
	grep -q gpuship_lookup_floor "$TRACEFS/uprobe_events" 2>/dev/null &&
		for e in lookup lookup_return launch; do echo "-:gpuship_lookup_floor/$e" >>"$TRACEFS/uprobe_events"; done
	rm -rf "$WORK"
}
trap cleanup EXIT
offset() { python3 "$HERE/entry_instructions.py" --offsets "$LIBCUDA" "$1" | awk '{print $2}'; }
LOOKUP=$(offset cuKernelGetFunction)
LAUNCH=$(offset cuLaunchKernel)
start() { # $1 mode
	case $1 in
	off) ;;
	floor)
		{ echo "p:gpuship_lookup_floor/lookup $LIBCUDA:$LOOKUP"
		  echo "r:gpuship_lookup_floor/lookup_return $LIBCUDA:$LOOKUP"
		  echo "p:gpuship_lookup_floor/launch $LIBCUDA:$LAUNCH"; } >>"$TRACEFS/uprobe_events"
		mkdir "$INSTANCE"; echo 0 >"$INSTANCE/tracing_on"
		echo 1 >"$INSTANCE/events/gpuship_lookup_floor/enable" ;;
	gpuship | no_skip)
		local skip=true; [ "$1" = no_skip ] && skip=false
		agent_start "$WORK/$skip.toml" "$WORK/$1.log" || { AGENT=; exit 1; }
		grep -o "repeat_lookups_at_entry=[0-9]*" "$WORK/$1.log" | head -1 ;;
	esac
}
stop() { # $1 mode
	case $1 in
	floor)
		grep gpuship_lookup_floor "$TRACEFS/uprobe_profile" | awk '{print "  hits", $2, $3}'
		echo 0 >"$INSTANCE/events/gpuship_lookup_floor/enable"; rmdir "$INSTANCE"
		for e in lookup lookup_return launch; do echo "-:gpuship_lookup_floor/$e" >>"$TRACEFS/uprobe_events"; done ;;
	gpuship | no_skip)
		agent_stop
		grep -o 'aggregated=[0-9]*\|lost_in_kernel=[0-9]*' "$WORK/$1.log" | sort -u | tr '\n' ' '; echo ;;
	esac
}
MODES=(off floor gpuship no_skip)
for round in $(seq 1 "$ROUNDS"); do
	for i in "${!MODES[@]}"; do
		mode=${MODES[$(( (i + round) % ${#MODES[@]} ))]}
		start "$mode"
		printf 'round %s %-8s ' "$round" "$mode"
		python3 "$HERE/lookup_cost.py" "$CALLS" | tee -a "$WORK/results.txt" | sed "s/^/ /"
		sed -i "\$s/^/$mode /" "$WORK/results.txt"
		stop "$mode"
	done
done
echo "== medians per mode (thread CPU ns per call)"
python3 - "$WORK/results.txt" <<'PY'
import statistics, sys
by = {}
for line in open(sys.argv[1]):
    mode, *fields = line.split()
    for f in fields:
        k, v = f.split("=")
        by.setdefault(mode, {}).setdefault(k, []).append(float(v))
for mode, values in by.items():
    print(mode, " ".join(f"{k}={statistics.median(v):.0f} ({min(v):.0f}-{max(v):.0f})" for k, v in values.items()))
PY
