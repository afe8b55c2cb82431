"""A PyTorch eager loop of tiny kernels: the worst case for per-launch tracing cost.

Usage: python3 launch_loop.py LAUNCHES
Prints `launch_loop launches=N seconds=S per_launch_us=U` for the timed part (after a warm-up
of 1,000 launches and a synchronize), so start-up and probe attachment are not counted.
"""
import sys
import time

import torch

launches = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000
x = torch.zeros(1, device="cuda")
for _ in range(1000):
    x.add_(1)
torch.cuda.synchronize()
start = time.perf_counter()
for _ in range(launches):
    x.add_(1)
torch.cuda.synchronize()
seconds = time.perf_counter() - start
print(f"launch_loop launches={launches} seconds={seconds:.4f} per_launch_us={seconds / launches * 1e6:.3f}")
