#!/usr/bin/env bash
# The overhead budget's cost inside a sampled process, measured at the budget's own timescale
# (docs/performance.md, "The overhead budget"): one steady training loop
# (benches/gpu/budget_loop.py MODEL, steady mode: `t=UNIX steps=N` at every 100 ms boundary)
# under the agent's embedded default, whose debug log stamps every sampling window it opens.
# budget_windows.py then compares the loop's step rate inside each window with the rate just
# around it (the same seconds of the same process: the host's drift between blocks cancels).
#
#   GPUSHIP=target/release/gpuship benches/gpu/budget_windows.sh MODEL SECONDS
#
# Output under $OUT (default /tmp/gpuship-windows): agent.log, timeline.txt, and the analysis.
set -uo pipefail
MODEL=${1:?model}
SECONDS_=${2:?seconds}
OUT=${OUT:-/tmp/gpuship-windows}
GPUSHIP=$(readlink -f "${GPUSHIP:-target/release/gpuship}")
HERE=$(readlink -f "$(dirname "$0")")
mkdir -p "$OUT"
cd "$OUT" || exit 1
echo "== machine: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null), $(nproc) CPUs, $(uname -r)"
"$GPUSHIP" run --log-level "info,gpuship::sources::cuda::budget=debug" >"$OUT/agent.log" 2>&1 &
AGENT=$!
for _ in $(seq 1 300); do
	grep -q "capture started" "$OUT/agent.log" && break
	kill -0 "$AGENT" 2>/dev/null || { echo "the agent exited:"; cat "$OUT/agent.log"; exit 1; }
	sleep 0.1
done
python3 -u "$HERE/budget_loop.py" "$MODEL" 100000000 >"$OUT/timeline.txt" &
LOOP=$!
until grep -q '^ready' "$OUT/timeline.txt" 2>/dev/null; do sleep 0.2; done
sleep "$SECONDS_"
kill -TERM $LOOP; wait $LOOP
kill -INT "$AGENT"; wait "$AGENT"
grep -h "overhead budget\|trap_cost\|per process\|sampl" "$OUT/agent.log" | cut -c1-260 | head -20
python3 "$HERE/budget_windows.py" "$OUT/agent.log" "$OUT/timeline.txt"
