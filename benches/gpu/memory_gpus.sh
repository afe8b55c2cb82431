#!/usr/bin/env bash
# Memory held and the GPU of every call on a real GPU (issue 20, parts 3 and 4), run on the GPU
# machine from the repo root with a carried release binary:
# `GPUSHIP=target/gpu/gpuship TRIGGER=target/gpu/xid_trigger.py benches/gpu/memory_gpus.sh`.
#
# 1. The agent with every call a row (`stats = []`, 2 s intervals) traces, started after it:
#    a. PyTorch with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: an MLP training loop and
#       2 GiB of tensors, then it reports torch.cuda.memory_reserved() and waits 5 s (the agent
#       writes cuda_memory rows meanwhile);
#    b. PyTorch with the default allocator: 1 GiB held, then torch.empty() of more than the free
#       memory (a plain-allocation out-of-memory error, never managed memory), caught.
#    Prints the held bytes beside memory_reserved(), the out-of-memory rows' held_memory, and how
#    many CUDA rows of each process carry the GPU's UUID.
# 2. The agent with its fleet default traces ../shared/gpu/xid_trigger.py (a real XID 31): the
#    XID's suspect kernel (suspects are now filtered by GPU) and the GPU of the trigger's rows.
set -uo pipefail
WORK=${WORK:-/tmp/gpuship-memory}
GPUSHIP=${GPUSHIP:-target/release/gpuship}
TRIGGER=${TRIGGER:-target/gpu/xid_trigger.py}
. "$(dirname "$0")/agent.sh"
rm -rf "$WORK"
mkdir -p "$WORK/rows" "$WORK/fleet"
grep -h "GPU UUID\|Bus Location" /proc/driver/nvidia/gpus/*/information | sed 's/^/   node: /'

# Part 1 sees the node's GPU beside a second, made-up one: with two GPUs listed, the agent's
# "the node has one GPU" fallback is off, so every GPU a row carries came from its thread's
# context (cuDeviceGetUuid, cuDevicePrimaryCtxRetain, cuCtxSetCurrent).
mkdir -p "$WORK/gpus/0000:ff:00.0"
cp -r /proc/driver/nvidia/gpus/* "$WORK/gpus/"
printf 'Model: \t\t made-up\nGPU UUID: \t GPU-00000000-0000-0000-0000-0000000000ff\nBus Location: \t 0000:ff:00.0\n' \
	>"$WORK/gpus/0000:ff:00.0/information"
parquet_config "$WORK/rows/agent.toml" "$WORK/rows"
printf '[sources.cuda]\nstats = []\nstats_interval_secs = 2\n[enrich]\nnvidia_proc_dir = "%s"\n' "$WORK/gpus" >>"$WORK/rows/agent.toml"
agent_start "$WORK/rows/agent.toml" "$WORK/rows/agent.log"
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python3 - >"$WORK/rows/vmm.out" <<'PY'
import os, time, torch
torch.manual_seed(0)
model = torch.nn.Sequential(
    torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024), torch.nn.ReLU(),
    torch.nn.Linear(1024, 10)).cuda()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
x = torch.randn(256, 512, device="cuda")
y = torch.randint(0, 10, (256,), device="cuda")
for step in range(200):
    opt.zero_grad(set_to_none=True)
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
big = [torch.empty(256 << 20, dtype=torch.uint8, device="cuda") for _ in range(8)]
torch.cuda.synchronize()
print(f"pid={os.getpid()} reserved={torch.cuda.memory_reserved()} allocated={torch.cuda.memory_allocated()}", flush=True)
time.sleep(5)
print(f"pid={os.getpid()} reserved_end={torch.cuda.memory_reserved()}", flush=True)
PY
cat "$WORK/rows/vmm.out" | sed 's/^/   vmm: /'
python3 - >"$WORK/rows/oom.out" <<'PY'
import os, time, torch
held = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
free, total = torch.cuda.mem_get_info()
print(f"pid={os.getpid()} reserved={torch.cuda.memory_reserved()} free={free} total={total}", flush=True)
try:
    torch.empty(free + (4 << 30), dtype=torch.uint8, device="cuda")
    print("no OOM?", flush=True)
except torch.cuda.OutOfMemoryError as err:
    print(f"OOM: {str(err).splitlines()[0][:160]}", flush=True)
time.sleep(3)
PY
cat "$WORK/rows/oom.out" | sed 's/^/   oom: /'
sleep 1
agent_stop
grep -E "final ring accounting.*ring=\"?cuda" "$WORK/rows/agent.log" | sed 's/^/   /'
python3 - "$WORK/rows" <<'PY'
import collections, glob, re, sys
import pyarrow as pa
import pyarrow.parquet as pq
work = sys.argv[1]
def table(kind):
    files = glob.glob(f"{work}/lake/{kind}/**/*.parquet", recursive=True)
    return pa.concat_tables([pq.read_table(f) for f in files], promote_options="default").to_pylist() if files else []
vmm = dict(re.findall(r"(\w+)=(\d+)", open(f"{work}/vmm.out").read()))
oom = dict(re.findall(r"(\w+)=(\d+)", open(f"{work}/oom.out").read()))
calls, memory = table("cuda"), table("cuda_memory")
for label, info in (("expandable segments", vmm), ("default allocator + OOM", oom)):
    pid = int(info["pid"])
    rows = [r for r in calls if r["pid"] == pid]
    uuids = collections.Counter(r["gpu_uuid"] for r in rows)
    print(f"== {label}: pid {pid}, {len(rows)} CUDA rows; gpu_uuid: {dict(uuids)}")
    contexts = collections.Counter(r["function"] for r in rows if r["function"].startswith(("cuCtx", "cuDevice")))
    print(f"   device and context calls: {dict(sorted(contexts.items()))}")
    threads = collections.Counter((r["tid"], r["gpu_uuid"]) for r in rows)
    print(f"   rows per (thread, gpu_uuid): {dict(threads)}")
    funcs = collections.Counter(r["function"] for r in rows if r["function"].startswith("cuMem"))
    print(f"   memory calls: {dict(sorted(funcs.items()))}")
    mine = sorted((r for r in memory if r["pid"] == pid), key=lambda r: r["time_ns"])
    print(f"   {len(mine)} cuda_memory rows")
    if mine:
        last = mine[-1]
        kinds = {k: last[f"{k}_bytes"] for k in ("device", "managed", "host_pinned", "pool", "physical")}
        on_gpu = kinds["device"] + kinds["pool"] + kinds["physical"]
        reserved = int(info["reserved"])
        print(f"   latest: {kinds} allocations={last['allocations']} seen_from_start={last['seen_from_start']} gpu={last['gpu_uuid']} bus={last['pci_bus_id']}")
        print(f"   held on the GPU (device+pool+physical) {on_gpu} vs torch.cuda.memory_reserved() {reserved}: "
              f"{100.0 * (on_gpu - reserved) / reserved:+.2f}%")
    for r in rows:
        if r["result_name"] == "CUDA_ERROR_OUT_OF_MEMORY":
            held = r["held_memory"]
            print(f"   OOM row: {r['function']} bytes={r['bytes']} gpu={r['gpu_uuid']} held={held}")
            for a in (r["largest_allocations"] or [])[:4]:
                print(f"      largest: {a}")
PY

parquet_config "$WORK/fleet/agent.toml" "$WORK/fleet"
agent_start "$WORK/fleet/agent.toml" "$WORK/fleet/agent.log"
python3 "$TRIGGER"
sleep 3
agent_stop
python3 - "$WORK/fleet" <<'PY'
import collections, glob, sys
import pyarrow as pa
import pyarrow.parquet as pq
def table(kind):
    files = glob.glob(f"{sys.argv[1]}/lake/{kind}/**/*.parquet", recursive=True)
    return pa.concat_tables([pq.read_table(f) for f in files], promote_options="default").to_pylist() if files else []
for x in table("xid"):
    print(f"== XID {x['code']} on {x['pci_bus_id']} pid={x['pid']} suspect_kernel={x['suspect_kernel']!r} "
          f"suspects={len(x['suspects'] or [])}")
rows = table("cuda")
print("   trigger rows by gpu_uuid:", dict(collections.Counter((r["pid"], r["gpu_uuid"]) for r in rows)))
PY
