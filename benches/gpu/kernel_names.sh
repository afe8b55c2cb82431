#!/usr/bin/env bash
# Kernel names on a real GPU (issue 20, part 1), run on the GPU machine from the repo root with a
# carried release binary: `GPUSHIP=target/gpu/gpuship benches/gpu/kernel_names.sh`.
#
# 1. The agent with every call a row (`stats = []`) traces a PyTorch MLP training loop (Adam,
#    expandable segments off) started after it: prints how many launch rows are named, the
#    top kernels, and how the handles were announced.
# 2. The agent with its fleet default traces ../shared/gpu/xid_trigger.py (a real XID 31): prints
#    the trigger's flight-recorder launch rows with their kernel names.
set -uo pipefail
WORK=${WORK:-/tmp/gpuship-kernels}
GPUSHIP=${GPUSHIP:-target/release/gpuship}
TRIGGER=${TRIGGER:-target/gpu/xid_trigger.py}
. "$(dirname "$0")/agent.sh"
rm -rf "$WORK"
mkdir -p "$WORK/rows" "$WORK/fleet"

parquet_config "$WORK/rows/agent.toml" "$WORK/rows"
printf '[sources.cuda]\nstats = []\n' >>"$WORK/rows/agent.toml"
agent_start "$WORK/rows/agent.toml" "$WORK/rows/agent.log"
python3 - <<'PY'
import os, torch
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
torch.cuda.synchronize()
print(f"mlp pid={os.getpid()} loss={loss.item():.4f}")
PY
sleep 2
agent_stop
grep -E "final ring accounting.*ring=\"?cuda" "$WORK/rows/agent.log" | sed 's/^/   /'
python3 - "$WORK/rows" <<'PY'
import collections, glob, sys
import pyarrow as pa
import pyarrow.parquet as pq
files = glob.glob(f"{sys.argv[1]}/lake/cuda/**/*.parquet", recursive=True)
rows = pa.concat_tables([pq.read_table(f) for f in files], promote_options="default").to_pylist()
launches = [r for r in rows if r["function"].startswith("cuLaunchKernel")]
named = [r for r in launches if r["kernel_name"] not in (None, "unknown")]
print(f"== {len(launches)} launch rows, {len(named)} named ({100.0 * len(named) / max(1, len(launches)):.2f}%), "
      f"{sum(r['kernel_name'] == 'unknown' for r in launches)} unknown, {sum(r['kernel_name'] is None for r in launches)} null")
makers = collections.Counter(r["function"] for r in rows if r["function"] in (
    "cuLibraryGetKernel", "cuModuleGetFunction", "cuKernelGetFunction", "cuLibraryLoadData",
    "cuModuleLoadData", "cuLibraryUnload", "cuModuleUnload"))
print("   handles made by:", dict(sorted(makers.items())))
print("   top kernels (launches, demangled name cut at 110 chars):")
for name, n in collections.Counter(r["kernel_name_demangled"] for r in launches).most_common(12):
    print(f"     {n:6d}  {name[:110]}")
longest = max((r["kernel_name"] for r in named), key=len, default="")
print(f"   longest name: {len(longest)} bytes")
PY

parquet_config "$WORK/fleet/agent.toml" "$WORK/fleet"
agent_start "$WORK/fleet/agent.toml" "$WORK/fleet/agent.log"
python3 "$TRIGGER"
sleep 3
agent_stop
grep -E "flight recorder|\"XID\"|XID" "$WORK/fleet/agent.log" | head -5 | cut -c1-400 | sed 's/^/   /'
python3 - "$WORK/fleet" <<'PY'
import glob, sys
import pyarrow as pa
import pyarrow.parquet as pq
files = glob.glob(f"{sys.argv[1]}/lake/cuda/**/*.parquet", recursive=True)
rows = pa.concat_tables([pq.read_table(f) for f in files], promote_options="default").to_pylist()
for r in rows:
    if r["function"].startswith("cuLaunchKernel") or r["result"] != 0 or r["function"] in ("cuModuleGetFunction", "cuLibraryGetKernel"):
        print(f"   {r['function']} result={r['result_name']} handle={r['handle']} kernel={r['kernel_name']!r} "
              f"demangled={r['kernel_name_demangled']!r} grid={r['grid_x']} recorder={r['flight_recorder']} incident={r['incident_id']}")
PY
python3 - "$WORK/fleet" <<'PY'
import glob, sys
import pyarrow as pa
import pyarrow.parquet as pq
files = glob.glob(f"{sys.argv[1]}/lake/xid/**/*.parquet", recursive=True)
for r in pa.concat_tables([pq.read_table(f) for f in files], promote_options="default").to_pylist():
    print(f"== XID {r['code']} pid={r['pid']} source={r['source']} suspect_kernel={r['suspect_kernel']!r}")
    for i, s in enumerate(r["suspects"] or []):
        print(f"   suspect {i + 1}: {s['function']} kernel={s['kernel_name_demangled']!r} handle={s['handle']:#x} "
              f"grid=({s['grid_x']},{s['grid_y']},{s['grid_z']}) block=({s['block_x']},{s['block_y']},{s['block_z']}) "
              f"completed={s['completed']} {(r['time_ns'] - s['time_ns']) / 1e6:.3f} ms before the XID")
PY
