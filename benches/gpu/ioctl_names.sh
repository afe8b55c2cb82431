#!/usr/bin/env bash
# NVIDIA ioctl names on a real driver (issue 20, part 5), run on the GPU machine from the repo
# root with a carried release binary: `GPUSHIP=target/gpu/gpuship benches/gpu/ioctl_names.sh`.
#
# The agent records every ioctl on an NVIDIA device file (the default driver source) into a
# Parquet lake while PyTorch runs an MLP loop, once with the default caching allocator and once
# with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (the virtual-memory API, which drives the
# UVM external-range commands). Prints, per device class, how many requests had a name, the
# unnamed codes if any, and the most frequent names; and the agent's unnamed-request log lines.
set -uo pipefail
WORK=${WORK:-/tmp/gpuship-ioctl}
GPUSHIP=${GPUSHIP:-target/release/gpuship}
HERE=$(dirname "$0")
. "$HERE/agent.sh"
rm -rf "$WORK"
mkdir -p "$WORK"
parquet_config "$WORK/agent.toml" "$WORK"
echo "== machine"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null
agent_start "$WORK/agent.toml" "$WORK/agent.log"
python3 "$HERE/launch_loop.py" 200 mlp
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python3 "$HERE/launch_loop.py" 200 mlp
sleep 2
agent_stop
grep -E "no name in gpuship|unnamed NVIDIA ioctl|final ring accounting ring=\"driver\"" "$WORK/agent.log" | cut -c1-400
python3 - "$WORK" <<'PY'
import collections, glob, sys
import pyarrow as pa
import pyarrow.parquet as pq
files = glob.glob(f"{sys.argv[1]}/lake/driver/**/*.parquet", recursive=True)
rows = pa.concat_tables([pq.read_table(f) for f in files], promote_options="default").to_pylist()
ioctls = [r for r in rows if r["hook"] == "ioctl"]
def cls(device):
    device = device or ""
    if device.startswith("nvidia-uvm"):
        return "uvm"
    if device == "nvidiactl" or (device.startswith("nvidia") and device[6:].isdigit()):
        return "rm"
    return "other"
by = collections.defaultdict(lambda: [0, 0])
unnamed = collections.Counter()
for r in ioctls:
    c = cls(r["device"])
    by[c][0] += 1
    if r["request_name"]:
        by[c][1] += 1
    else:
        unnamed[(c, r["device"], hex(r["request"]))] += 1
print(f"== {len(ioctls)} ioctls on NVIDIA device files")
for c, (total, named) in sorted(by.items()):
    print(f"   {c}: {named} of {total} named")
print("   unnamed by code:", dict(unnamed) or "none")
names = collections.Counter(r["request_name"] for r in ioctls if r["request_name"])
print("   most frequent:", names.most_common(12))
uvm = [r for r in ioctls if cls(r["device"]) == "uvm"][:1]
if uvm:
    r = uvm[0]
    print("   a UVM row:", {k: r[k] for k in ("device", "request", "request_dir", "request_type", "request_nr", "request_size", "request_name")})
PY
