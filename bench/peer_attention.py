#!/usr/bin/env python3
"""PyTorch's scaled_dot_product_attention on the same cases as `netcl bench`'s attention cases, as JSON lines.

    python3 bench/peer_attention.py [--small]

FP32 with TF32 off (torch.backends.cuda.matmul.allow_tf32 = False, cudnn.allow_tf32 = False), on the first CUDA
device. Shapes, work and keys follow src/bench/cases_attention.rs: attention_fwd[_causal] and
attention_fwd_bwd[_causal] at B=8, H=12, S=1024, D=64 (4·B·H·S²·D flops forward, halved when causal, 3.5× that
forward+backward); attention_decode: one query against a 4,096-entry cache (bytes of K and V read).
`ms` is the minimum and `median_ms` the median of 20 timed runs after 3 warm-ups, each timed with CUDA events.
"""
import json
import sys

import torch
import torch.nn.functional as F

small = "--small" in sys.argv
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
dev = torch.device("cuda")
B, H, S, D = (1, 4, 256, 64) if small else (8, 12, 1024, 64)
DB, DH, DC = (1, 4, 1024) if small else (8, 12, 4096)


def timed(fn, reps=20, warm=3):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[0], times[len(times) // 2]


def emit(case, ms, med, **work):
    line = {"case": case, "impl": "torch", "device": torch.cuda.get_device_name(0), "ms": round(ms, 4),
            "median_ms": round(med, 4), "torch": torch.__version__}
    line.update(work)
    print(json.dumps(line), flush=True)


g = torch.Generator(device=dev).manual_seed(7)
q, k, v, go = (torch.randn(B, H, S, D, device=dev, generator=g) for _ in range(4))
for causal in (False, True):
    flops = 4.0 * B * H * S * S * D * (0.5 if causal else 1.0)
    suffix = "_causal" if causal else ""
    ms, med = timed(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
    emit("attention_fwd" + suffix, ms, med, gflops=round(flops / ms / 1e6, 1))
    qg, kg, vg = (t.clone().requires_grad_(True) for t in (q, k, v))

    def fwd_bwd():
        o = F.scaled_dot_product_attention(qg, kg, vg, is_causal=causal)
        torch.autograd.grad(o, (qg, kg, vg), go)

    ms, med = timed(fwd_bwd)
    emit("attention_fwd_bwd" + suffix, ms, med, gflops=round(3.5 * flops / ms / 1e6, 1))
qd = torch.randn(DB, DH, 1, D, device=dev, generator=g)
kc, vc = (torch.randn(DB, DH, DC, D, device=dev, generator=g) for _ in range(2))
ms, med = timed(lambda: F.scaled_dot_product_attention(qd, kc, vc))
emit("attention_decode", ms, med, gbps=round(2 * DB * DH * DC * D * 4 / ms / 1e6, 1))
