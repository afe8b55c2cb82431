"""The PyTorch MLP training loop of launch_loop.py, in phases a controller starts one by one,
so that one process runs with the agent on and off in turn (benches/gpu/fleet_mode.sh).

Usage: python3 phased_loop.py STEPS PHASES

Prints `ready pid=P` after the warm-up, then for each line `go MODE` read from stdin runs STEPS
training steps and prints `phase I mode=MODE wall_us_per_step=W cpu_us_per_step=C
process_cpu_us_per_step=P`, where C is the main thread's own CPU time (time.thread_time: user +
system, so it includes the kernel's uprobe trap on each launch it makes) and P the whole
process's (time.process_time). The backward pass runs in PyTorch's autograd thread for the
GPU, which makes its launches: only P counts the traps of those.
"""
import os
import sys
import time

import torch

steps = int(sys.argv[1])
phases = int(sys.argv[2])
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


for _ in range(50):
    step()
torch.cuda.synchronize()
print(f"ready pid={os.getpid()}", flush=True)
for phase in range(phases):
    line = sys.stdin.readline().split()
    if not line:
        break
    mode = line[1]
    torch.cuda.synchronize()
    wall, cpu, process = time.perf_counter(), time.thread_time(), time.process_time()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    wall, cpu = time.perf_counter() - wall, time.thread_time() - cpu
    process = time.process_time() - process
    print(
        f"phase {phase} mode={mode} wall_us_per_step={wall / steps * 1e6:.1f}"
        f" cpu_us_per_step={cpu / steps * 1e6:.1f}"
        f" process_cpu_us_per_step={process / steps * 1e6:.1f}",
        flush=True,
    )
