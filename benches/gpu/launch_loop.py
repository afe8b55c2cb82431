"""PyTorch loops for the per-launch cost of tracing on a real GPU.

Usage: python3 launch_loop.py COUNT [tiny|mlp]

tiny (default): COUNT eager launches of a one-element kernel (`x.add_(1)`), the worst case for
per-launch tracing cost: the loop does nothing but launch.
mlp: COUNT training steps of a small MLP (batch 1024, 4 x 1024 linear layers, Adam): a mix of
GEMMs and small elementwise kernels at a few thousand launches per second or more, closer to a
real eager training loop.

Prints `launch_loop workload=W count=N seconds=S per_iteration_us=U ...` for the timed part
(after a warm-up and a synchronize), so start-up and probe attachment are not counted, and how
much of libcuda's text the process holds privately (pages a uprobe breakpoint copied) or maps
with huge (PMD) entries.
"""
import sys
import time

import torch

count = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000
workload = sys.argv[2] if len(sys.argv) > 2 else "tiny"

if workload == "tiny":
    x = torch.zeros(1, device="cuda")

    def step():
        x.add_(1)

    warmup = 1000
elif workload == "mlp":
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        *[layer for _ in range(4) for layer in (torch.nn.Linear(1024, 1024), torch.nn.ReLU())]
    ).cuda()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    inputs = torch.randn(1024, 1024, device="cuda")
    targets = torch.randn(1024, 1024, device="cuda")

    def step():
        optimizer.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(inputs), targets)
        loss.backward()
        optimizer.step()

    warmup = 20
else:
    sys.exit(f"unknown workload {workload!r}: tiny or mlp")

for _ in range(warmup):
    step()
torch.cuda.synchronize()
start = time.perf_counter()
for _ in range(count):
    step()
torch.cuda.synchronize()
seconds = time.perf_counter() - start


def libcuda_pages():
    """kB of libcuda.so text that this process holds privately (pages a uprobe's breakpoint
    copied) and that the kernel maps with PMD (huge) entries."""
    private = pmd = 0
    inside = False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            fields = line.split()
            if "-" in fields[0] and len(fields) >= 5:
                inside = len(fields) >= 6 and "libcuda.so" in fields[-1] and "x" in fields[1]
            elif inside and fields[0] == "Private_Dirty:":
                private += int(fields[1])
            elif inside and fields[0] == "FilePmdMapped:":
                pmd += int(fields[1])
    return private, pmd


private_kb, pmd_kb = libcuda_pages()
print(
    f"launch_loop workload={workload} count={count} seconds={seconds:.4f}"
    f" per_iteration_us={seconds / count * 1e6:.3f}"
    f" libcuda_text_private_kb={private_kb} libcuda_text_pmd_kb={pmd_kb}"
)
