"""Peer baseline for the matrix products: PyTorch on CUDA, square products at three precisions and FP32 shapes.

Usage: python3 bench/peer_matmul_tc.py [cuda|cpu] [--small] [--reps N] [--cases a,b]

Cases (n×n times n×n, work 2·n³ FLOPs), named like `netcl bench`'s where it has them:

    matmul_<n>        f32 tensors, TF32 off (torch.backends.cuda.matmul.allow_tf32 = False): FP32
    matmul_<n>_tf32   f32 tensors, TF32 on (allow_tf32 = True): operands rounded to TF32, f32 accumulation
    matmul_<n>_fp16   f16 tensors (f32 accumulation, PyTorch's default), f16 product

for n = 2048 and 4096 (--small: 1024 for both, as `netcl bench --small` runs its 4096 cases), and the FP32
shapes of `netcl bench`'s GEMM shape cases (src/bench/cases_gemm.rs), TF32 off, each a batch × (m×k times k×n):

    matmul_8192       8192³                         (--small 1024³)
    matmul_odd_4097   4097×4093 times 4093×4095     (--small 513×509 times 509×511)
    matmul_1000       1000³
    bmm_64x512        64 × 512³                     (--small 8 × 256³)
    bmm_96x1024x64    96 × 1024×64 times 64×1024    (--small 8 × 256×64 times 64×256)

Inputs are standard normal, seeded. Timing: two warm-up calls, then --reps calls (default 20, 3 with --small), each followed
by a device synchronisation (bench/peer_common.py).

Prints a header line, then one JSON line per case with the keys of `netcl bench`: case, impl ("torch-cublas"),
device, ms (minimum), median_ms, first_call_ms, gflops, plus tflops (at the minimum) and precision.
"""
import json
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ beside the scripts
from peer_common import GEMM_SHAPES, options, timed  # noqa: E402

DEVICE, SMALL, REPS, WANTED = options("cuda", 20)


def emit(**kw):
    print(json.dumps(kw), flush=True)


def product_line(torch, sync, case, a, w, flops, **extra):
    """Times `torch.matmul(a, w)` (its first call alone, then `timed`) and prints the case's line."""
    sync()
    t0 = time.perf_counter()
    torch.matmul(a, w)
    sync()
    first = (time.perf_counter() - t0) * 1e3
    ms, median = timed(lambda: torch.matmul(a, w), sync, REPS)
    emit(case=case, impl="torch-cublas", **extra, ms=round(ms, 4), median_ms=round(median, 4),
         first_call_ms=round(first, 1), gflops=round(flops / ms / 1e6, 1), tflops=round(flops / ms / 1e9, 2))


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
            product_line(torch, sync, case, a, b, 2.0 * side**3, device=name, precision=precision, n=side)
    torch.backends.cuda.matmul.allow_tf32 = False
    for case, full, small in GEMM_SHAPES:
        if WANTED and case not in WANTED:
            continue
        b, m, k, n = small if SMALL else full
        gen = torch.Generator(device="cpu").manual_seed(11)
        shape_a, shape_b = ([m, k], [k, n]) if b == 1 else ([b, m, k], [b, k, n])
        a = torch.randn(*shape_a, generator=gen).to(dev)
        w = torch.randn(*shape_b, generator=gen).to(dev)
        product_line(torch, sync, case, a, w, 2.0 * b * m * k * n, device=name, precision="fp32", batch=b, m=m,
                     k=k, n=n)


if __name__ == "__main__":
    main()
