#!/usr/bin/env bash
# Stats mode on a real GPU (issue 19), run on the GPU machine from the repo root with a carried
# release binary: `GPUSHIP=target/gpu/gpuship benches/gpu/stats_mode.sh [STEPS]`.
#
# Starts the agent with the daemon's default CUDA settings (launches, async copies and graph
# launches in stats mode, 5 s intervals here), every XID source and a Parquet lake under
# $OUT/lake; runs the PyTorch MLP training loop (benches/gpu/launch_loop.py mlp STEPS), then
# ../shared/gpu/xid_trigger.py (a real XID 31); stops the agent and prints the accounting, the
# run summary's calls, the agent's CPU and peak RSS, and the lake's rows per table with the
# cuda_stats rows of the training loop (read with pyarrow).
set -uo pipefail
STEPS=${1:-3000}
OUT=${OUT:-/tmp/gpuship-stats}
GPUSHIP=${GPUSHIP:-target/release/gpuship}
HERE=$(dirname "$0")
TRIGGER=${TRIGGER:-shared/gpu/xid_trigger.py}
mkdir -p "$OUT"
cat >"$OUT/stats.toml" <<TOML
[agent]
progress_interval_secs = 60
state_dir = "$OUT/state"
[metrics]
enabled = false
[sources.cuda]
stats_interval_secs = 5
[[sinks]]
type = "parquet"
path = "$OUT/lake"
max_file_age_secs = 2
TOML
echo "== machine"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null
"$GPUSHIP" run --config "$OUT/stats.toml" --summary-json "$OUT/summary.json" 2>"$OUT/agent.log" &
AGENT=$!
for _ in $(seq 1 300); do grep -q "capture started" "$OUT/agent.log" && break; sleep 0.1; done
grep -E "CUDA uprobes attached|capture started" "$OUT/agent.log" | sed 's/^/agent: /'
cpu() { awk '{print $14 + $15}' "/proc/$AGENT/stat"; }
CPU0=$(cpu)
python3 "$HERE/launch_loop.py" "$STEPS" mlp
TRAIN_PID_NOTE="(the loop's pid is in the rows)"
python3 "$TRIGGER"
sleep 3
CPU1=$(cpu)
HWM=$(awk '/VmHWM/ {print $2}' "/proc/$AGENT/status")
kill -INT "$AGENT"; wait "$AGENT"
echo "== agent: CPU $(( (CPU1 - CPU0) ))0 ms over the loop and the trigger (clock ticks x10), peak RSS ${HWM} KiB"
grep -E "final ring accounting|XID " "$OUT/agent.log" | sed 's/^/agent: /' | cut -c1-400
python3 - "$OUT" <<'PY'
import json, sys, glob, collections
out = sys.argv[1]
s = json.load(open(f"{out}/summary.json"))
for ring in s["accounting"]["rings"]:
    if ring["ring"] == "cuda":
        print("== cuda ring:", {k: ring[k] for k in ("emitted", "received", "lost_in_kernel", "aggregated", "aggregated_received", "aggregated_pending", "stats_full")})
calls = s["summary"]["calls"]
print("== summary calls (top 10):", sorted(calls.items(), key=lambda kv: -kv[1])[:10])
print("== summary failures:", s["summary"]["failures"])
print("== summary xids:", s["summary"]["xids"])
try:
    import pyarrow.parquet as pq
except ImportError:
    print("no pyarrow"); sys.exit(0)
for table in ("xid", "cuda", "cuda_stats", "driver"):
    files = glob.glob(f"{out}/lake/{table}/**/*.parquet", recursive=True)
    rows = sum(pq.read_metadata(f).num_rows for f in files)
    print(f"== lake {table}: {rows} rows in {len(files)} files")
files = glob.glob(f"{out}/lake/cuda_stats/**/*.parquet", recursive=True)
if files:
    t = pq.ParquetDataset(files).read(columns=["pid", "comm", "function", "result_name", "interval_ns", "calls", "duration_p50_ns", "duration_p99_ns", "duration_max_ns"]).to_pylist()
    per = collections.defaultdict(lambda: [0, 0])
    for r in t:
        per[(r["pid"], r["function"], r["result_name"])][0] += r["calls"]
        per[(r["pid"], r["function"], r["result_name"])][1] += 1
    for k, (n, rows) in sorted(per.items(), key=lambda kv: -kv[1][0])[:8]:
        print("cuda_stats", k, "calls", n, "rows", rows)
    for r in sorted(t, key=lambda r: -r["calls"])[:3]:
        print("row", r)
files = glob.glob(f"{out}/lake/cuda/**/*.parquet", recursive=True)
if files:
    t = pq.ParquetDataset(files).read(columns=["pid", "function", "result_name", "incident_id"]).to_pylist()
    print("== cuda rows by function:", collections.Counter(r["function"] for r in t).most_common(8))
    print("== failed cuda rows:", [(r["pid"], r["function"], r["result_name"], r["incident_id"]) for r in t if r["result_name"] != "CUDA_SUCCESS"][:5])
files = glob.glob(f"{out}/lake/xid/**/*.parquet", recursive=True)
if files:
    t = pq.ParquetDataset(files).read(columns=["code", "source", "pid", "comm", "incident_id", "time_ns"]).to_pylist()
    print("== xid rows:", t)
PY
