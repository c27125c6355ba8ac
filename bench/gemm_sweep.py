#!/usr/bin/env python3
"""Sweeps gemm_tiled configurations of kernels/gemm.cl with pyopencl on the first GPU (else the first OpenCL
device): kernel time from events (minimum and median), TFLOP/s, error against numpy (float64), and on NVIDIA the
compiler's register and local-memory report (-cl-nv-verbose), plus register caps (-cl-nv-maxrregcount).

Usage: python3 bench/gemm_sweep.py [--small] [case ...]   (JSON lines go to $OUT/gemm_sweep.jsonl when OUT is set)
The cases are the products of the bench's pointwise convolutions (forward, grad_x, grad_w), 2048^3, and odd
shapes in every transpose combination."""
import os, sys, json, time, itertools
import numpy as np
import pyopencl as cl

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
SRC = open(os.path.join(ROOT, "kernels", "gemm.cl")).read()
small = "--small" in sys.argv
only = [a for a in sys.argv[1:] if not a.startswith("--")]

plats = cl.get_platforms()
dev = None
for p in plats:
    for d in p.get_devices():
        if d.type & cl.device_type.GPU:
            dev = d
if dev is None:
    dev = plats[0].get_devices()[0]
nv = "NVIDIA" in dev.vendor
ctx = cl.Context([dev])
q = cl.CommandQueue(ctx, properties=cl.command_queue_properties.PROFILING_ENABLE)
print("device:", dev.name, flush=True)

progs = {}
def prog(defs):
    key = tuple(sorted(defs.items()))
    if key not in progs:
        defs = dict(defs)
        cap = defs.pop("MAXRREG", None)
        opts = ["-D%s=%s" % kv for kv in defs.items()] + ["-cl-mad-enable"]
        if cap:
            opts.append("-cl-nv-maxrregcount=%d" % cap)
        if nv:
            opts.append("-cl-nv-verbose")
        pr = cl.Program(ctx, SRC).build(options=opts)
        log = pr.get_build_info(dev, cl.program_build_info.LOG)
        regs = [l.strip() for l in log.splitlines() if "registers" in l or "spill" in l]
        progs[key] = (pr, regs)
    return progs[key]

# name, M, N, K, batch, transA, transB, A shared across batch
S = 4 if small else 1
CASES = [
    ("mm2048", 2048 // (2 if small else 1), 2048 // (2 if small else 1), 2048 // (2 if small else 1), 1, 0, 0, 0),
    ("rn28_fwd", 512, 1024, 256, 32 // S, 0, 0, 1),
    ("rn28_gx", 256, 1024, 512, 32 // S, 1, 0, 1),
    ("rn28_gw", 512, 256, 1024, 32 // S, 0, 1, 0),
    ("mb56_gx", 32, 3136, 192, 32 // S, 1, 0, 1),
    ("mb56_gw", 192, 32, 3136, 32 // S, 0, 1, 0),
    ("mb14_fwd", 64, 196, 384, 32 // S, 0, 0, 1),
    ("mb14_gx", 384, 196, 64, 32 // S, 1, 0, 1),
    ("mb14_gw", 64, 384, 196, 32 // S, 0, 1, 0),
    ("odd", 67, 93, 45, 3, 0, 0, 0),
    ("odd_ta", 67, 93, 45, 3, 1, 0, 0),
    ("odd_tb", 67, 93, 45, 3, 0, 1, 0),
    ("odd_tab", 67, 93, 45, 3, 1, 1, 1),
]
CONFIGS = [(128, 128, 16, 8, 8), (128, 64, 16, 8, 4), (64, 64, 16, 8, 4), (64, 32, 16, 4, 4), (32, 64, 16, 4, 4),
           (64, 32, 32, 4, 4), (128, 32, 32, 8, 4), (32, 32, 32, 4, 4), (32, 32, 64, 4, 4)]
SPLITS = [1, 2, 4, 8]
CAPS = [((128, 128, 16, 8, 8), 128), ((128, 64, 16, 8, 4), 96), ((64, 64, 16, 8, 4), 96), ((64, 64, 16, 8, 4), 80),
        ((128, 128, 16, 8, 8), 96)] if nv else []

rng = np.random.default_rng(0)
reps = 3 if small else 15
results = []
for (name, M, N, K, B, ta, tb, sha) in CASES:
    if only and name not in only:
        continue
    a = rng.standard_normal(((1 if sha else B), K, M) if ta else ((1 if sha else B), M, K), dtype=np.float32)
    bm = rng.standard_normal((B, N, K) if tb else (B, K, N), dtype=np.float32)
    A_ = np.swapaxes(a, 1, 2) if ta else a
    B_ = np.swapaxes(bm, 1, 2) if tb else bm
    ref = np.matmul(A_.astype(np.float64), B_.astype(np.float64)).astype(np.float32)
    if ref.shape[0] != B:
        ref = np.broadcast_to(ref, (B, M, N))
    mf = cl.mem_flags
    da = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=a)
    db = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=bm)
    dc = cl.Buffer(ctx, mf.READ_WRITE, size=B * M * N * 4)
    lda = M if ta else K
    ldb = K if tb else N
    sA = 0 if sha else M * K
    sB = N * K
    flop = 2.0 * M * N * K * B
    splits = SPLITS if K >= 384 else [1]
    variants = [("tiled", c, s) for c in CONFIGS for s in splits] + [("cap%d" % cap, c, 1) for (c, cap) in CAPS]
    for (kind, (tm, tn, tk, rm, rn), sp) in variants:
        L = -(-(-(-K // sp)) // 16) * 16
        sp2 = -(-K // L)
        vec = int(lda % 4 == 0 and ldb % 4 == 0 and N % 4 == 0 and sA % 4 == 0 and sB % 4 == 0)
        defs = dict(TRANS_A=ta, TRANS_B=tb, TM=tm, TN=tn, TK=tk, RM=rm, RN=rn, VEC=vec)
        if kind.startswith("cap"):
            defs["MAXRREG"] = int(kind[3:])
        kname = "gemm_tiled"
        try:
            pr, regs = prog(defs)
        except Exception as e:
            print(name, kind, (tm, tn, tk, rm, rn), "BUILD FAIL", str(e)[:300], flush=True)
            continue
        k = getattr(pr, kname)
        wx, wy = tn // rn, tm // rm
        if sp2 > 1:
            part = cl.Buffer(ctx, mf.READ_WRITE, size=B * sp2 * M * N * 4)
            out, ldc, sC = part, N, M * N
        else:
            out, ldc, sC = dc, N, M * N
        i32 = np.int32
        args = [i32(M), i32(N), i32(K), da, i32(0), i32(lda), i32(sA), db, i32(0), i32(ldb), i32(sB),
                out, i32(0), i32(ldc), i32(sC), i32(sp2), i32(L), dc, i32(0), i32(0)]
        gsz = (-(-N // tn) * wx, -(-M // tm) * wy, B * sp2)
        red = pr.gemm_reduce_splits if sp2 > 1 else None
        def run():
            evs = [k(q, gsz, (wx, wy, 1), *args)]
            if red is not None:
                evs.append(red(q, (N, M, B), None, i32(M), i32(N), i32(sp2), part, dc, i32(0), i32(N), i32(M * N),
                               dc, i32(0), i32(0)))
            return evs
        try:
            run(); q.finish()
            got = np.empty((B, M, N), np.float32)
            cl.enqueue_copy(q, got, dc); q.finish()
            err = float(np.max(np.abs(got - ref)) / (np.max(np.abs(ref)) + 1e-30))
            ts = []
            for _ in range(reps):
                evs = run(); q.finish()
                ts.append((evs[-1].profile.end - evs[0].profile.start) * 1e-6)
        except Exception as e:
            print(name, kind, (tm, tn, tk, rm, rn), sp2, "RUN FAIL", str(e)[:300], flush=True)
            continue
        ts.sort()
        r = dict(case=name, kind=kind, cfg=[tm, tn, tk, rm, rn], splits=sp2, vec=vec,
                 ms=round(ts[0], 4), med=round(ts[len(ts) // 2], 4), tflops=round(flop / ts[0] / 1e9, 2),
                 err=err, regs=regs[-1] if regs else "")
        results.append(r)
        flag = "" if err < 1e-4 else "  <<< WRONG"
        print("%-9s %-4s %-22s S=%-2d %8.4f %8.4f %6.2f TF  err %.1e %s%s" % (
            name, kind, r["cfg"], sp2, r["ms"], r["med"], r["tflops"], err, r["regs"][-60:], flag),
            flush=True)
    best = sorted([r for r in results if r["case"] == name], key=lambda r: r["ms"])[:3]
    print("BEST", name, [(b["kind"], b["cfg"], b["splits"], b["ms"]) for b in best], flush=True)
out = os.environ.get("OUT")
if out:
    with open(os.path.join(out, "gemm_sweep.jsonl"), "w") as f:
        for r in results:
            f.write(json.dumps(r) + "\n")
