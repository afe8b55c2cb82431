"""Training loops for the overhead budget's measurement on a real GPU (benches/gpu/budget.sh).

Usage: python3 budget_loop.py MODEL STEPS [BLOCKS]

MODEL:
  mlp          Adam MLP, 4 x (Linear 1024 + ReLU), batch 512 (about 1.75 ms a step on an H100)
  transformer  6 encoder layers, d=1024, 16 heads, bf16 autocast, AdamW, 16 x 512 tokens
  tiny         one-element kernel launches (`x.add_(1)`): nothing but launches

Blocks: prints `ready pid=P` after a warm-up, then for each `go MODE` line read from stdin
sleeps IDLE_S seconds (the same idle gap in every mode, so GPU clocks drop alike), runs steps
for WARMUP_S seconds untimed, then STEPS timed steps, and prints `phase I mode=MODE
wall_us_per_step=W cpu_us_per_step=C process_cpu_us_per_step=P` (pair_ratios.py reads them).

Steady (BLOCKS = 0): runs STEPS steps back to back after the warm-up and prints `t=UNIX
steps=N` after every step that crosses a 100 ms boundary, and at the end: the timeline an
estimate of launches is checked against.
"""
import os
import signal
import sys
import time

import torch

model_name = sys.argv[1]
steps = int(sys.argv[2])
blocks = int(sys.argv[3]) if len(sys.argv) > 3 else 0
idle_s = float(os.environ.get("IDLE_S", "1"))
warmup_s = float(os.environ.get("WARMUP_S", "2"))
torch.manual_seed(0)

if model_name == "mlp":
    model = torch.nn.Sequential(
        *[layer for _ in range(4) for layer in (torch.nn.Linear(1024, 1024), torch.nn.ReLU())]
    ).cuda()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    inputs = torch.randn(512, 1024, device="cuda")
    targets = torch.randn(512, 1024, device="cuda")

    def step():
        optimizer.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(inputs), targets)
        loss.backward()
        optimizer.step()

elif model_name == "transformer":
    layer = torch.nn.TransformerEncoderLayer(
        d_model=1024, nhead=16, dim_feedforward=4096, batch_first=True
    )
    model = torch.nn.TransformerEncoder(layer, num_layers=6).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    inputs = torch.randn(16, 512, 1024, device="cuda")
    targets = torch.randn(16, 512, 1024, device="cuda")

    def step():
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.mse_loss(model(inputs).float(), targets)
        loss.backward()
        optimizer.step()

elif model_name == "tiny":
    x = torch.zeros(1, device="cuda")

    def step():
        x.add_(1)

else:
    sys.exit(f"unknown model {model_name}")

for _ in range(30):
    step()
torch.cuda.synchronize()
print(f"ready pid={os.getpid()}", flush=True)

if blocks == 0:
    # SIGTERM ends the run after the current step, with its last line printed (a background
    # job of a script ignores SIGINT).
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    done = 0
    next_mark = time.time()
    while done < steps and not stopping:
        step()
        done += 1
        now = time.time()
        if now >= next_mark:
            print(f"t={now:.6f} steps={done}", flush=True)
            next_mark = now + 0.1
    torch.cuda.synchronize()
    print(f"t={time.time():.6f} steps={done}", flush=True)
    sys.exit(0)

for phase in range(blocks):
    line = sys.stdin.readline().split()
    if not line:
        break
    mode = line[1]
    time.sleep(idle_s)
    until = time.perf_counter() + warmup_s
    while time.perf_counter() < until:
        step()
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
