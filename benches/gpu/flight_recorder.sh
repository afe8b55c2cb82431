#!/usr/bin/env bash
# The flight recorder on a real GPU (issue 19), run on the GPU machine from the repo root with a
# carried release binary: `GPUSHIP=target/gpu/gpuship benches/gpu/flight_recorder.sh [STEPS]`.
#
# The agent runs with the daemon's defaults (launches in stats mode, the flight recorder on) and
# a Parquet lake; a PyTorch MLP loop (STEPS steps) runs first, as a bystander; then
# ../shared/gpu/xid_trigger.py causes a real XID 31. Prints the incident's rows: the XID, the
# trigger's failed call and the flight-recorder rows of the trigger process, grouped by incident
# id, and checks that no bystander call was written.
set -uo pipefail
STEPS=${1:-500}
OUT=${OUT:-/tmp/gpuship-recorder}
GPUSHIP=${GPUSHIP:-target/release/gpuship}
HERE=$(dirname "$0")
TRIGGER=${TRIGGER:-shared/gpu/xid_trigger.py}
mkdir -p "$OUT"
cat >"$OUT/recorder.toml" <<TOML
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
"$GPUSHIP" run --config "$OUT/recorder.toml" >"$OUT/agent.log" 2>&1 &
AGENT=$!
for _ in $(seq 1 300); do grep -q "capture started" "$OUT/agent.log" && break; sleep 0.1; done
python3 "$HERE/launch_loop.py" "$STEPS" mlp
python3 "$TRIGGER" 2>&1 | grep -v "^  File\|^Traceback\|^cupy_backends\|^Exception ignored"
sleep 4
kill -INT "$AGENT"; wait "$AGENT"
grep -E "XID |flight recorder|final ring accounting ring=\"cuda\"" "$OUT/agent.log" | cut -c1-420
python3 - "$OUT" <<'PY'
import collections, glob, sys
import pyarrow as pa
import pyarrow.parquet as pq
out = sys.argv[1]
def table(kind):
    files = glob.glob(f"{out}/lake/{kind}/**/*.parquet", recursive=True)
    return pa.concat_tables([pq.read_table(f) for f in files], promote_options="default").to_pylist() if files else []
xids = table("xid")
cuda = table("cuda")
for x in xids:
    print(f"== XID {x['code']} pid={x['pid']} source={x['source']} incident={x['incident_id']}")
    incident = x["incident_id"]
    rows = [r for r in cuda if r.get("incident_id") == incident]
    failed = [r for r in rows if r["result"] != 0]
    recorded = [r for r in rows if r.get("flight_recorder")]
    print(f"   cuda rows with this incident: {len(rows)}: {len(failed)} failed, {len(recorded)} from the flight recorder")
    for r in failed[:5]:
        print(f"   failed: pid={r['pid']} {r['function']} {r['result_name']}")
    by_fn = collections.Counter(r["function"] for r in recorded)
    pids = sorted({r["pid"] for r in recorded})
    print(f"   recorder rows by function: {dict(by_fn)}; pids {pids}")
    if recorded:
        span = (max(r["time_ns"] for r in recorded) - min(r["time_ns"] for r in recorded)) / 1e6
        launch = next((r for r in recorded if r["function"].startswith("cuLaunchKernel")), None)
        print(f"   recorder rows span {span:.1f} ms; a launch: {launch and {k: launch[k] for k in ('function', 'grid_x', 'block_x', 'stream', 'duration_ns', 'result_name')}}")
others = [r for r in cuda if r.get("flight_recorder") and r.get("incident_id") not in {x['incident_id'] for x in xids}]
print(f"== flight-recorder rows outside the XID incidents: {len(others)}")
print(f"== all flight-recorder rows: {sum(1 for r in cuda if r.get('flight_recorder'))}; all cuda rows: {len(cuda)}")
PY
