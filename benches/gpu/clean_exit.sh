#!/usr/bin/env bash
# Which failed calls gpuship reports for processes that end normally (no fault): a short
# PyTorch job and a short CuPy job under the daemon's defaults, then every `cuda` row whose
# result is not CUDA_SUCCESS and every CUDA-failure series on /metrics. An alert on CUDA
# failures must not fire on plain exits. Run on the GPU machine from the repo root:
#   GPUSHIP=target/gpu/gpuship bash benches/gpu/clean_exit.sh
set -uo pipefail
GPUSHIP=${GPUSHIP:-target/release/gpuship}
PORT=${PORT:-19465}
WORK=$(mktemp -d)
. "$(dirname "$0")/agent.sh"
watched_config "$WORK/agent.toml" "$WORK" "$PORT"
AGENT=
trap '[ -n "$AGENT" ] && agent_stop; rm -rf "$WORK"' EXIT
agent_start "$WORK/agent.toml" "$WORK/agent.log" || exit 1
grep -o "repeat_lookups_at_entry=[0-9]*" "$WORK/agent.log"
python3 -c "import torch; x = torch.randn(1024, 1024, device='cuda'); y = (x @ x).relu().sum(); torch.cuda.synchronize(); print('torch ok', float(y) > 0)"
python3 -c "import cupy as cp; x = cp.arange(1 << 20, dtype=cp.float32); print('cupy ok', float((x * 2).sum()) > 0)"
sleep 3
python3 -c "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:$PORT/metrics').read().decode())" |
	grep '^gpuship_cuda_call_errors_total' || echo "no gpuship_cuda_call_errors_total series"
agent_stop
python3 - "$WORK/lake" <<'PY'
import glob, sys
import pyarrow as pa, pyarrow.parquet as pq
files = glob.glob(f"{sys.argv[1]}/cuda/**/*.parquet", recursive=True)
rows = pa.concat_tables([pq.read_table(f) for f in files], promote_options="default").to_pylist() if files else []
print(f"== {len(rows)} cuda rows")
counts = {}
for r in rows:
    key = (r["comm"], r["function"], r["result_name"])
    counts[key] = counts.get(key, 0) + 1
failed = {k: n for k, n in counts.items() if k[2] not in ("CUDA_SUCCESS", "NOT_CAPTURED")}
print("failed calls by (thread, function, result):", failed or "none")
print("context and primary-context rows:", {k: n for k, n in counts.items() if "Ctx" in k[1]})
PY
