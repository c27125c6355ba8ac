"""The CPU's limit for the FP32 products: NumPy's BLAS (OpenBLAS sgemm in NumPy's wheels) on the shapes of
`netcl bench`'s GEMM cases, to run beside `netcl --device cpu bench` on the same machine.

Usage: python3 bench/peer_gemm_numpy.py [--small] [--reps N] [--cases a,b]

Cases (batch × (m×k times k×n), as src/bench/cases_gemm.rs and `matmul_1024`):

    matmul_1024       1024³
    matmul_8192       8192³                         (--small 1024³)
    matmul_odd_4097   4097×4093 times 4093×4095     (--small 513×509 times 509×511)
    matmul_1000       1000³
    bmm_64x512        64 × 512³                     (--small 8 × 256³)
    bmm_96x1024x64    96 × 1024×64 times 64×1024    (--small 8 × 256×64 times 64×256)

Inputs are standard normal f32, seeded; the product is `numpy.matmul` into a preallocated output. Timing: two
warm-up calls, then --reps calls (default 10, 3 with --small). Prints a header line with NumPy's BLAS, then one
JSON line per case with the keys of `netcl bench`: case, impl ("numpy-openblas"), ms (minimum), median_ms,
gflops (at the minimum).
"""
import json
import sys

sys.dont_write_bytecode = True  # no __pycache__ beside the scripts
from peer_common import GEMM_SHAPES, options, timed  # noqa: E402

_, SMALL, REPS, WANTED = options("cpu", 10)

SHAPES = [("matmul_1024", (1, 1024, 1024, 1024), (1, 1024, 1024, 1024))] + GEMM_SHAPES


def main():
    import numpy as np

    blas = "unknown"
    try:
        info = np.show_config(mode="dicts")
        blas = info["Build Dependencies"]["blas"]["name"] + " " + info["Build Dependencies"]["blas"]["version"]
    except Exception:  # older NumPy: no dict form
        pass
    print(json.dumps({"impl": "numpy-openblas", "numpy": np.__version__, "blas": blas, "small": SMALL,
                      "reps": REPS}), flush=True)
    rng = np.random.default_rng(11)
    for case, full, small in SHAPES:
        if WANTED and case not in WANTED:
            continue
        b, m, k, n = small if SMALL else full
        sa, sb, so = ([m, k], [k, n], [m, n]) if b == 1 else ([b, m, k], [b, k, n], [b, m, n])
        a = rng.standard_normal(sa, dtype=np.float32)
        w = rng.standard_normal(sb, dtype=np.float32)
        out = np.empty(so, dtype=np.float32)
        ms, median = timed(lambda: np.matmul(a, w, out=out), lambda: None, REPS)
        flops = 2.0 * b * m * k * n
        print(json.dumps({"case": case, "impl": "numpy-openblas", "batch": b, "m": m, "k": k, "n": n,
                          "ms": round(ms, 4), "median_ms": round(median, 4),
                          "gflops": round(flops / ms / 1e6, 1)}), flush=True)


if __name__ == "__main__":
    main()
