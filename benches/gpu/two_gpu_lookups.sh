#!/usr/bin/env bash
# Whether repeated kernel lookups counted at entry lose an answer when one thread switches
# between GPUs (needs two): a PyTorch process alternates torch.cuda.set_device(0) and (1) with
# the same MLP training step, under the defaults with repeat_lookups_at_entry on and then off.
# Each run prints the process's distinct cuKernelGetFunction answers (CUfunction handles) and
# the kernels they came from; with the skip on, none may be missing (same counts as off), and
# the start log says how many lookups are attached with the session program.
#   GPUSHIP=target/gpu/gpuship bash benches/gpu/two_gpu_lookups.sh
set -uo pipefail
GPUSHIP=${GPUSHIP:-target/release/gpuship}
WORK=$(mktemp -d)
. "$(dirname "$0")/agent.sh"
AGENT=
trap '[ -n "$AGENT" ] && agent_stop; rm -rf "$WORK"' EXIT
cat >"$WORK/switch.py" <<'PY'
import os, torch
assert torch.cuda.device_count() >= 2, "needs two GPUs"
# The MLP step of phased_loop.py (whose optimizer makes the runtime's repeated lookups) on
# each GPU in turn, from one thread.
models = [torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.ReLU()).cuda(d) for d in (0, 1)]
optimizers = [torch.optim.Adam(m.parameters(), lr=1e-4) for m in models]
inputs = [torch.randn(256, 512, device=f"cuda:{d}") for d in (0, 1)]
for _ in range(100):
    for d in (0, 1):
        torch.cuda.set_device(d)
        optimizers[d].zero_grad(set_to_none=True)
        models[d](inputs[d]).square().mean().backward()
        optimizers[d].step()
for d in (0, 1):
    torch.cuda.synchronize(d)
print(f"switch done pid={os.getpid()}", flush=True)
PY
for skip in true false; do
	cat >"$WORK/$skip.toml" <<TOML
[agent]
state_dir = "$WORK/state-$skip"
[sources.cuda]
repeat_lookups_at_entry = $skip
stats_interval_secs = 1
[[sinks]]
type = "parquet"
path = "$WORK/lake-$skip"
max_file_age_secs = 1
TOML
	agent_start "$WORK/$skip.toml" "$WORK/$skip.log" || exit 1
	echo "== repeat_lookups_at_entry = $skip: $(grep -o 'repeat_lookups_at_entry=[0-9]*' "$WORK/$skip.log" | head -1)"
	out=$(python3 "$WORK/switch.py")
	echo "$out"
	sleep 2
	agent_stop
	python3 - "$WORK/lake-$skip" "${out##*pid=}" <<'PYX'
import glob, sys
import pyarrow as pa, pyarrow.parquet as pq
lake, pid = sys.argv[1], int(sys.argv[2])
def table(name):
    files = glob.glob(f"{lake}/{name}/**/*.parquet", recursive=True)
    return pa.concat_tables([pq.read_table(f) for f in files], promote_options="default").to_pylist() if files else []
rows = [r for r in table("cuda") if r["pid"] == pid and r["function"] == "cuKernelGetFunction"]
answers = {(r["parent_handle"], r["handle"]) for r in rows if r["result_name"] == "CUDA_SUCCESS"}
kernels = {k for k, _ in answers}
per_kernel = sorted(sum(1 for k2, _ in answers if k2 == k) for k in kernels)
stats = [r for r in table("cuda_stats") if r["pid"] == pid and r["function"] == "cuKernelGetFunction"]
by_result = {}
for r in stats:
    by_result[r["result_name"]] = by_result.get(r["result_name"], 0) + r["calls"]
print(f"   distinct answers {len(answers)} from {len(kernels)} kernels (answers per kernel {per_kernel}); calls by result {by_result}")
PYX
done
