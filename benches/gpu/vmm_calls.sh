#!/usr/bin/env bash
# The virtual-memory allocation calls of PyTorch's expandable segments on a real GPU (issue 20,
# part 3), run on the GPU machine from the repo root with a carried release binary:
# `GPUSHIP=target/gpu/gpuship benches/gpu/vmm_calls.sh`.
#
# The agent (default probes, Parquet) traces a PyTorch process with
# PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True that allocates tensors, prints
# torch.cuda.memory_reserved(), and exits; prints the process's allocation-family rows per
# function (calls, bytes) beside PyTorch's own figure.
set -uo pipefail
WORK=${WORK:-/tmp/gpuship-vmm}
GPUSHIP=${GPUSHIP:-target/release/gpuship}
. "$(dirname "$0")/agent.sh"
rm -rf "$WORK"
mkdir -p "$WORK"
parquet_config "$WORK/agent.toml" "$WORK"
agent_start "$WORK/agent.toml" "$WORK/agent.log"
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python3 - <<'PY'
import os, torch
tensors = [torch.empty(n * 1024 * 1024, dtype=torch.uint8, device="cuda") for n in (3, 50, 200, 700)]
torch.cuda.synchronize()
print(f"pid={os.getpid()} memory_reserved={torch.cuda.memory_reserved()} memory_allocated={torch.cuda.memory_allocated()}")
PY
sleep 2
agent_stop
python3 - "$WORK" <<'PY'
import collections, glob, sys
import pyarrow as pa
import pyarrow.parquet as pq
files = glob.glob(f"{sys.argv[1]}/lake/cuda/**/*.parquet", recursive=True)
rows = pa.concat_tables([pq.read_table(f) for f in files], promote_options="default").to_pylist()
fam = collections.defaultdict(lambda: [0, 0])
for r in rows:
    if r["function"].startswith("cuMem") and not r["function"].startswith("cuMemcpy"):
        fam[r["function"]][0] += 1
        fam[r["function"]][1] += r["bytes"] or 0
for f, (n, b) in sorted(fam.items()):
    print(f"   {f}: {n} calls, {b} bytes")
PY
