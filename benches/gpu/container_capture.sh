#!/usr/bin/env bash
# A PyTorch job whose libcuda is a copy only its own mount namespace has (a tmpfs at
# /opt/job-cuda, LD_LIBRARY_PATH there), as a container with its own driver files has it. The
# agent runs on its defaults (which also attach the host's libcuda: a different file) and must
# find the copy through the job's /proc/<pid>/maps, attach it through /proc/<pid>/root and
# capture the job. Prints the agent's attach lines, the library series of /metrics and
# `gpuship doctor`'s libraries while the job runs, and the job's calls in the lake.
# Run on the GPU machine from the repo root:
#   GPUSHIP=target/gpu/gpuship [TRIGGER=target/gpu/xid_trigger.py] bash benches/gpu/container_capture.sh [STEPS]
# With TRIGGER, the XID 31 trigger then runs the same way (its own libcuda copy) and the XID's
# log line (its suspect kernel) is printed. With LAKE_OUT, the lake is copied there at the end
# (e.g. $OUT/lake on the device tool, for `gpuship report` on another machine).
set -uo pipefail
GPUSHIP=${GPUSHIP:-target/release/gpuship}
STEPS=${1:-2000}
PORT=${PORT:-19466}
WORK=$(mktemp -d)
. "$(dirname "$0")/agent.sh"
watched_config "$WORK/agent.toml" "$WORK" "$PORT"
AGENT=
trap '[ -n "$AGENT" ] && agent_stop; rm -rf "$WORK"' EXIT
metrics() {
	python3 -c "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:$PORT/$1').read().decode())"
}
agent_start "$WORK/agent.toml" "$WORK/agent.log" || exit 1
grep -o "CUDA uprobes attached.*" "$WORK/agent.log" | cut -c1-400
HOST_LIB=$(readlink -f /usr/local/nvidia/lib64/libcuda.so.1)
echo "== host libcuda: $HOST_LIB"
cat >"$WORK/job.py" <<'PY'
import os, sys, time, torch
steps = int(sys.argv[1])
torch.manual_seed(0)
layers = []
for _ in range(4):
    layers += [torch.nn.Linear(1024, 1024), torch.nn.ReLU()]
model = torch.nn.Sequential(*layers, torch.nn.Linear(1024, 10)).cuda()
opt = torch.optim.Adam(model.parameters())
x = torch.randn(512, 1024, device="cuda")
y = torch.randint(0, 10, (512,), device="cuda")
start = time.time()
for _ in range(steps):
    opt.zero_grad(set_to_none=True)
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
torch.cuda.synchronize()
libs = sorted({l.split()[-1] for l in open("/proc/self/maps") if "libcuda.so" in l})
print(f"job pid={os.getpid()} steps={steps} seconds={time.time() - start:.1f} libcuda mapped: {libs}", flush=True)
PY
unshare --mount --propagation private bash -c '
	mkdir -p /opt/job-cuda && mount -t tmpfs tmpfs /opt/job-cuda &&
	cp "$1" /opt/job-cuda/libcuda.so.1 &&
	LD_LIBRARY_PATH=/opt/job-cuda${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} exec python3 "$2" "$3"' \
	bash "$HOST_LIB" "$WORK/job.py" "$STEPS" >"$WORK/job.out" 2>&1 &
JOB=$!
sleep 8
echo "== agent lines about libraries"
grep -E "CUDA library attached|maps a new CUDA library|cannot be attached" "$WORK/agent.log" | cut -c1-400
echo "== /metrics library series (job running)"
metrics metrics | grep -E '^gpuship_cuda_(library|processes_attached)'
echo "== /health: $(metrics health)"
echo "== gpuship doctor: libraries"
"$GPUSHIP" doctor --config "$WORK/agent.toml" 2>&1 | grep -iE "cuda library|cuda discovery|^ *cuda " | cut -c1-300
wait "$JOB"
echo "== job: $(tail -3 "$WORK/job.out")"
if [ -n "${TRIGGER:-}" ]; then
	unshare --mount --propagation private bash -c '
		mkdir -p /opt/job-cuda && mount -t tmpfs tmpfs /opt/job-cuda &&
		cp "$1" /opt/job-cuda/libcuda.so.1 &&
		LD_LIBRARY_PATH=/opt/job-cuda${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} exec python3 "$2"' \
		bash "$HOST_LIB" "$TRIGGER"
	sleep 4
	echo "== the XID and its suspect"
	grep -E "XID code=" "$WORK/agent.log" | cut -c1-600
fi
sleep 3
agent_stop
[ -n "${LAKE_OUT:-}" ] && mkdir -p "$LAKE_OUT" && cp -r "$WORK/lake/." "$LAKE_OUT/"
grep -E "final ring accounting ring=\"cuda\"" "$WORK/agent.log" | cut -c1-300
python3 - "$WORK/lake" "$WORK/job.out" <<'PY'
import glob, re, sys
import pyarrow as pa, pyarrow.parquet as pq
lake, out = sys.argv[1], open(sys.argv[2]).read()
match = re.search(r"job pid=(\d+)", out)
pid = int(match.group(1)) if match else None
def table(kind):
    files = glob.glob(f"{lake}/{kind}/**/*.parquet", recursive=True)
    return pa.concat_tables([pq.read_table(f) for f in files], promote_options="default").to_pylist() if files else []
print(f"== job pid {pid}: rows of it in the lake")
stats = [r for r in table("cuda_stats") if r["pid"] == pid]
calls = {}
for r in stats:
    calls[r["function"]] = calls.get(r["function"], 0) + r["calls"]
print(f"cuda_stats rows={len(stats)} calls={sum(calls.values())}")
for function, n in sorted(calls.items(), key=lambda kv: -kv[1])[:8]:
    print(f"  {n:>9} {function}")
rows = [r for r in table("cuda") if r["pid"] == pid]
print(f"cuda rows={len(rows)}")
named = {}
for r in rows:
    if r.get("kernel_name"):
        named[r["function"]] = named.get(r["function"], 0) + 1
print(f"rows naming a kernel, by function: {named}")
PY
