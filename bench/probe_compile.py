#!/usr/bin/env python3
"""Whether the OpenCL driver compiles programs of one process concurrently.

    python3 bench/probe_compile.py [THREADS] [PROGRAMS]

Builds PROGRAMS (default 4) variants of kernels/gemm.cl's tiled GEMM (each with a distinct comment, so no
driver cache answers) one after another, then again on THREADS threads (default 4), on the first GPU PyOpenCL
finds, and prints one JSON line with each way's wall time. Run with CUDA_CACHE_DISABLE=1 on NVIDIA.
"""
import json
import sys
import threading
import time

import pyopencl as cl

threads = int(sys.argv[1]) if len(sys.argv) > 1 else 4
count = int(sys.argv[2]) if len(sys.argv) > 2 else 4
ctx = cl.create_some_context(interactive=False)
dev = ctx.devices[0]
src = open("kernels/prelude.cl").read() + open("kernels/gemm.cl").read()
opts = ["-DTM=128", "-DTN=128", "-DTK=16", "-DRM=8", "-DRN=8", "-DTRANS_A=1", "-DTRANS_B=0"]


def build(tag):
    t0 = time.perf_counter()
    cl.Program(ctx, f"// variant {tag} {time.time_ns()}\n" + src).build(options=opts)
    return (time.perf_counter() - t0) * 1e3


serial = [build(f"s{i}") for i in range(count)]
each = [0.0] * count
t0 = time.perf_counter()
ts = [threading.Thread(target=lambda i=i: each.__setitem__(i, build(f"p{i}"))) for i in range(count)]
for t in ts:
    t.start()
for t in ts:
    t.join()
par = (time.perf_counter() - t0) * 1e3
print(json.dumps({"device": dev.name, "driver": dev.driver_version, "programs": count, "threads": threads,
                  "serial_ms": [round(x) for x in serial], "serial_total_ms": round(sum(serial)),
                  "parallel_wall_ms": round(par), "parallel_each_ms": [round(x) for x in each]}))
