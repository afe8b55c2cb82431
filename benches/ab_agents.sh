#!/usr/bin/env bash
# Interleaved A/B of two agent builds under one bench harness: the same bench binary runs with
# GPUSHIP_AGENT set to each build in turn (A B B A A B ...), so that a slow spell of a shared VM
# hits both alike. Each run's table goes to OUT/<round>-<label>.txt and is echoed.
#
#   benches/ab_agents.sh BENCH A_LABEL A_BINARY B_LABEL B_BINARY [ROUNDS]
#   e.g. LOAD_SCENARIO="2 threads, parquet" benches/ab_agents.sh load \
#            before /work/ab/gpuship-before after target/release/gpuship 4
#
# Build a past commit's agent in a worktree with its own target directory. The bench's own
# settings (LOAD_SCENARIO, LOAD_RUNS, OVERHEAD_MODES, OVERHEAD_ROUNDS) pass through. Root.
set -euo pipefail
cd "$(dirname "$0")/.."
bench=${1:?bench name (load, overhead, soak)}
labels=("${2:?A label}" "${4:?B label}")
binaries=("$(realpath "${3:?A binary}")" "$(realpath "${5:?B binary}")")
rounds=${6:-4}
out=${OUT:-target/ab}
mkdir -p "$out"

executable=$(cargo bench --locked --bench "$bench" --no-run --message-format=json 2>/dev/null |
	python3 -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["bench"]:
        print(m["executable"])' | tail -1)
[ -x "$executable" ] || { echo "could not build bench $bench" >&2; exit 1; }

for ((round = 0; round < rounds; round++)); do
	# A B, then B A: the order alternates so that neither build always runs first.
	if ((round % 2 == 0)); then order=(0 1); else order=(1 0); fi
	for i in "${order[@]}"; do
		file="$out/$round-${labels[$i]}.txt"
		echo "== round $round: ${labels[$i]} (${binaries[$i]})"
		GPUSHIP_AGENT=${binaries[$i]} "$executable" --bench | tee "$file"
	done
done
