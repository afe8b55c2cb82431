"""Per-call cost of cuKernelGetFunction and cuLaunchKernel on the real libcuda, from the calling
thread's own CPU time: the loop the CUDA runtime makes on every training step (ask for a
kernel's CUfunction, launch it), without the rest of a training step around it.

Usage: python3 lookup_cost.py [CALLS]   (default 200000 lookups and 100000 launches)
Prints one line: `lookups_ns=... launches_ns=... lookups_wall_ns=... launches_wall_ns=...`:
per call, the median of batches of 10,000 lookups and of 1,000 launches (the launch loop
synchronises after each batch, outside the timed part).
"""
import ctypes
import statistics
import sys
import time

PTX = b""".version 7.0
.target sm_50
.address_size 64
.visible .entry gpuship_empty()
{
	ret;
}
"""


def check(result, what):
    if result != 0:
        sys.exit(f"{what} failed: CUresult {result}")


def main():
    calls = int(sys.argv[1]) if len(sys.argv) > 1 else 200000
    cuda = ctypes.CDLL("libcuda.so.1")
    check(cuda.cuInit(0), "cuInit")
    device = ctypes.c_int()
    check(cuda.cuDeviceGet(ctypes.byref(device), 0), "cuDeviceGet")
    context = ctypes.c_void_p()
    check(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(context), device), "cuDevicePrimaryCtxRetain")
    check(cuda.cuCtxSetCurrent(context), "cuCtxSetCurrent")
    library = ctypes.c_void_p()
    check(cuda.cuLibraryLoadData(ctypes.byref(library), ctypes.c_char_p(PTX), None, None, 0, None, None, 0),
          "cuLibraryLoadData")
    kernel = ctypes.c_void_p()
    check(cuda.cuLibraryGetKernel(ctypes.byref(kernel), library, b"gpuship_empty"), "cuLibraryGetKernel")
    function = ctypes.c_void_p()
    get_function = cuda.cuKernelGetFunction
    get_function.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p]
    out = ctypes.byref(function)
    check(get_function(out, kernel), "cuKernelGetFunction")
    launch = cuda.cuLaunchKernel
    launch.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
    sync = cuda.cuCtxSynchronize

    # Warm up both paths, then time them in batches; the median batch is the figure, so a
    # batch the scheduler or the GPU queue interrupted does not move it.
    for _ in range(1000):
        get_function(out, kernel)
        launch(function, 1, 1, 1, 1, 1, 1, 0, None, None, None)
    check(sync(), "cuCtxSynchronize")
    lookups_cpu, lookups_wall = [], []
    for _ in range(max(calls // 10000, 1)):
        cpu0, wall0 = time.thread_time_ns(), time.perf_counter_ns()
        for _ in range(10000):
            get_function(out, kernel)
        lookups_cpu.append((time.thread_time_ns() - cpu0) / 10000)
        lookups_wall.append((time.perf_counter_ns() - wall0) / 10000)
    launches_cpu, launches_wall = [], []
    for _ in range(max(calls // 2000, 1)):
        cpu0, wall0 = time.thread_time_ns(), time.perf_counter_ns()
        for _ in range(1000):
            launch(function, 1, 1, 1, 1, 1, 1, 0, None, None, None)
        launches_cpu.append((time.thread_time_ns() - cpu0) / 1000)
        launches_wall.append((time.perf_counter_ns() - wall0) / 1000)
        check(sync(), "cuCtxSynchronize")
    median = statistics.median
    print(f"lookups_ns={median(lookups_cpu):.0f} launches_ns={median(launches_cpu):.0f} "
          f"lookups_wall_ns={median(lookups_wall):.0f} launches_wall_ns={median(launches_wall):.0f}",
          flush=True)


if __name__ == "__main__":
    main()
