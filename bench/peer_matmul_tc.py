"""Peer baseline for the tensor-core matrix products: PyTorch on CUDA, square products at three precisions.

Usage: python3 bench/peer_matmul_tc.py [cuda|cpu] [--small] [--reps N] [--cases a,b]

Cases (n×n times n×n, work 2·n³ FLOPs), named like `netcl bench`'s where it has them:

    matmul_<n>        f32 tensors, TF32 off (torch.backends.cuda.matmul.allow_tf32 = False): FP32
    matmul_<n>_tf32   f32 tensors, TF32 on (allow_tf32 = True): operands rounded to TF32, f32 accumulation
    matmul_<n>_fp16   f16 tensors (f32 accumulation, PyTorch's default), f16 product

for n = 2048 and 4096 (--small: 1024 for both, as `netcl bench --small` runs its 4096 cases). Inputs are
standard normal, seeded. Timing: two warm-up calls, then --reps calls (default 20, 3 with --small), each followed
by a device synchronisation (bench/peer_common.py).

Prints a header line, then one JSON line per case with the keys of `netcl bench`: case, impl ("torch-cublas"),
device, ms (minimum), median_ms, first_call_ms, gflops, plus tflops (at the minimum) and precision.
"""
import json
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ beside the scripts
from peer_common import options, timed  # noqa: E402

DEVICE, SMALL, REPS, WANTED = options("cuda", 20)


def emit(**kw):
    print(json.dumps(kw), flush=True)


def main():
    import torch

    dev = torch.device(DEVICE)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    emit(device=name, impl="torch-cublas", torch=torch.__version__, small=SMALL, reps=REPS)
    for n in (2048, 4096):
        side = 1024 if SMALL else n
        for precision, suffix in (("fp32", ""), ("tf32", "_tf32"), ("fp16", "_fp16")):
            case = f"matmul_{n}{suffix}"
            if WANTED and case not in WANTED:
                continue
            torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
            gen = torch.Generator(device="cpu").manual_seed(11)
            dtype = torch.float16 if precision == "fp16" else torch.float32
            a = torch.randn(side, side, generator=gen).to(dev, dtype)
            b = torch.randn(side, side, generator=gen).to(dev, dtype)
            sync()
            t0 = time.perf_counter()
            torch.matmul(a, b)
            sync()
            first = (time.perf_counter() - t0) * 1e3
            ms, median = timed(lambda: torch.matmul(a, b), sync, REPS)
            flops = 2.0 * side**3
            emit(case=case, impl="torch-cublas", device=name, precision=precision, n=side,
                 ms=round(ms, 4), median_ms=round(median, 4), first_call_ms=round(first, 1),
                 gflops=round(flops / ms / 1e6, 1), tflops=round(flops / ms / 1e9, 2))
    torch.backends.cuda.matmul.allow_tf32 = False


if __name__ == "__main__":
    main()
