#!/usr/bin/env python3
"""netcl 0.3.2's flash_attention (PyOpenCL) on the same cases as `netcl bench`'s attention cases, as JSON lines.

    PYOPENCL_CTX=0 python3 bench/peer_attention_netcl.py [--small] [--reps N] [CASES...]

Runs on the OpenCL device PyOpenCL picks (PYOPENCL_CTX, e.g. the PoCL CPU device). Shapes, work and keys follow
src/bench/cases_attention.rs: attention_fwd[_causal] and attention_fwd_bwd[_causal] at B=8, H=12, S=1024, D=64
(--small: B=1, H=4, S=256), 4·B·H·S²·D flops forward (halved when causal) and 3.5× that forward+backward;
attention_decode: one query against a 4,096-entry cache (--small: 1,024), the bytes of K and V read.
netcl 0.3.2 has a backward (`flash_attention_backward`: delta, dq, dk/dv kernels) and a decode
(`flash_attention_decode`); fwd_bwd times its forward then its backward, as our case does.
`ms` is the minimum and `median_ms` the median of the timed runs (default 5 after 1 warm-up), each timed on the
host around the call and `queue.finish()`; `first_call_ms` includes building its program. `rel_err` is the
largest error over the largest magnitude against a float64 NumPy reference (the forward output; for fwd_bwd,
the worst of dq, dk, dv).
"""
import json
import sys
import time

import numpy as np
import pyopencl as cl

from netcl.core.tensor import Tensor
from netcl.ops.attention import flash_attention, flash_attention_backward, flash_attention_decode

args = sys.argv[1:]
small = "--small" in args
reps = 5
if "--reps" in args:
    reps = int(args[args.index("--reps") + 1])
wanted = [a for a in args if not a.startswith("--") and not a.isdigit()]
B, H, S, D = (1, 4, 256, 64) if small else (8, 12, 1024, 64)
DB, DH, DC = (1, 4, 1024) if small else (8, 12, 4096)

ctx = cl.create_some_context(interactive=False)
queue = cl.CommandQueue(ctx)
device = ctx.devices[0].name.strip()


def timed(fn):
    t0 = time.perf_counter()
    fn()
    queue.finish()
    first = (time.perf_counter() - t0) * 1e3
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        queue.finish()
        times.append((time.perf_counter() - t0) * 1e3)
    times.sort()
    return first, times[0], times[len(times) // 2]


def emit(case, first, ms, med, err, **work):
    line = {"case": case, "impl": "netcl-0.3.2", "device": device, "ms": round(ms, 4), "median_ms": round(med, 4),
            "first_call_ms": round(first, 1), "rel_err": err}
    line.update(work)
    print(json.dumps(line), flush=True)


def rel(a, ref):
    return float(np.max(np.abs(a - ref)) / (np.max(np.abs(ref)) + 1e-30))


def reference(q, k, v, go, causal, scale):
    """Attention and its gradients in float64 over [B, H, S, D]."""
    q, k, v, go = (a.astype(np.float64) for a in (q, k, v, go))
    s = np.einsum("bhid,bhjd->bhij", q, k) * scale
    if causal:
        s = np.where(np.triu(np.ones(s.shape[-2:], bool), k=1), -np.inf, s)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    o = p @ v
    dv = np.einsum("bhij,bhid->bhjd", p, go)
    dp = go @ np.swapaxes(v, -1, -2)
    ds = p * (dp - (go * o).sum(-1, keepdims=True)) * scale
    return o, ds @ k, np.einsum("bhij,bhid->bhjd", ds, q), dv


rng = np.random.default_rng(7)
qh, kh, vh, gh = (rng.standard_normal((B, H, S, D), dtype=np.float32) for _ in range(4))
q, k, v, go = (Tensor.from_host(queue, a) for a in (qh, kh, vh, gh))
scale = 1.0 / D ** 0.5
for causal in (False, True):
    suffix = "_causal" if causal else ""
    flops = 4.0 * B * H * S * S * D * (0.5 if causal else 1.0)
    ro, rdq, rdk, rdv = reference(qh, kh, vh, gh, causal, scale)
    if not wanted or "attention_fwd" + suffix in wanted:
        out = {}

        def fwd():
            out["o"], out["lse"] = flash_attention(q, k, v, causal=causal)

        first, ms, med = timed(fwd)
        emit("attention_fwd" + suffix, first, ms, med, rel(out["o"].to_host(), ro), gflops=round(flops / ms / 1e6, 2))
    if not wanted or "attention_fwd_bwd" + suffix in wanted:
        grads = {}

        def fwd_bwd():
            o, lse = flash_attention(q, k, v, causal=causal)
            grads["g"] = flash_attention_backward(q, k, v, o, lse, go, causal=causal)

        first, ms, med = timed(fwd_bwd)
        err = max(rel(t.to_host(), r) for t, r in zip(grads["g"], (rdq, rdk, rdv)))
        emit("attention_fwd_bwd" + suffix, first, ms, med, err, gflops=round(3.5 * flops / ms / 1e6, 2))
if not wanted or "attention_decode" in wanted:
    qd = rng.standard_normal((DB, DH, 1, D), dtype=np.float32)
    kc, vc = (rng.standard_normal((DB, DH, DC, D), dtype=np.float32) for _ in range(2))
    tq, tk, tv = (Tensor.from_host(queue, a) for a in (qd, kc, vc))
    out = {}

    def dec():
        out["o"] = flash_attention_decode(tq, tk, tv, DC)

    first, ms, med = timed(dec)
    s = np.einsum("bhid,bhjd->bhij", qd.astype(np.float64), kc) * scale
    p = np.exp(s - s.max(-1, keepdims=True))
    ref = (p / p.sum(-1, keepdims=True)) @ vc
    emit("attention_decode", first, ms, med, rel(out["o"].to_host(), ref),
         gbps=round(2 * DB * DH * DC * D * 4 / ms / 1e6, 2))
