"""Peer baseline for the whole-model cases: netcl 0.3.2's ResNet18 (PyOpenCL) on one OpenCL device.

Usage: python3 bench/peer_models_netcl.py [gpu|auto|cpu-name] [--small] [--reps N] [--cases a,b]

netcl 0.3.2 has `netcl.nn.ResNet18(num_classes=10, base_channels=64, use_batchnorm=True)` and no MobileNetV2,
so only the resnet18 cases run here. Case names, shapes and FLOP counts match `netcl bench`'s
(src/bench/cases_models.rs):

    resnet18_infer_224 / resnet18_train_224   batch 32 at 224x224   (--small: batch 2 at 32x32)
    resnet18_infer_112 / resnet18_train_112   batch 128 at 112x112  (--small: batch 8 at 16x16)

`infer` is one forward pass without a tape. netcl 0.3.2's ResNet18 has no evaluation mode: its batch norms
always normalise with the batch's statistics, so its "inference" does that work too. `train` is one step:
forward on a tape, softmax cross-entropy against one-hot labels, backward, SGD with momentum 0.9 (lr 0.01),
zero_grad. FLOPs per step count the convolutions and the Linear head (2 multiply-adds each); training counts
three times the forward (forward, input gradient, weight gradient).

Prints one JSON line per case: case, impl ("netcl-0.3.2"), device, ms (minimum), median_ms, first_call_ms,
gflops, loss (train cases: the first step's loss) or out_abs_mean (infer cases).
"""
import json
import sys
import time

import numpy as np

sys.dont_write_bytecode = True  # no __pycache__ beside the scripts
from peer_common import options, patch_netcl032_copies, timed  # noqa: E402


dev_arg, small, reps, wanted = options("gpu", 5)

# (batch, hw) at full size and --small.
SHAPES = {"224": ((32, 224), (2, 32)), "112": ((128, 112), (8, 16))}


def resnet18_forward_flops(n, hw, base=64, classes=10, in_ch=3):
    """Convolution and Linear FLOPs of one forward pass of netcl's CIFAR-style ResNet18 (2 per multiply-add)."""
    def conv(c, f, k, s, p, h):
        o = (h + 2 * p - k) // s + 1
        return 2.0 * n * f * o * o * c * k * k, o

    total, h = conv(in_ch, base, 3, 1, 1, hw)
    c = base
    for stage, f in enumerate([base, base * 2, base * 4, base * 8]):
        for b in range(2):
            s = 2 if (stage > 0 and b == 0) else 1
            fl1, o = conv(c, f, 3, s, 1, h)
            fl2, _ = conv(f, f, 3, 1, 1, o)
            total += fl1 + fl2
            if s != 1 or c != f:
                total += conv(c, f, 1, s, 0, h)[0]
            c, h = f, o
    return total + 2.0 * n * c * classes


def emit(**kw):
    print(json.dumps(kw), flush=True)


def main():
    patch_netcl032_copies()
    from netcl import autograd as ag
    from netcl.core.device import manager
    from netcl.core.tensor import Tensor
    from netcl.nn import functional
    from netcl.nn.resnet import ResNet18
    from netcl.optim.sgd import SGD

    h = manager.default(device=dev_arg)
    q = h.queue
    emit(device=h.device_name, platform=h.platform_name, impl="netcl-0.3.2", small=small, reps=reps)
    for size in ("224", "112"):
        (n, hw) = SHAPES[size][1 if small else 0]
        rng = np.random.default_rng(5)
        x_host = rng.standard_normal((n, 3, hw, hw), dtype=np.float32)
        labels = (np.arange(n) % 10).astype(np.int64)
        onehot = np.eye(10, dtype=np.float32)[labels]
        for kind in ("infer", "train"):
            name = f"resnet18_{kind}_{size}"
            if wanted and name not in wanted:
                continue
            try:
                model = ResNet18(q, num_classes=10, base_channels=64, use_batchnorm=True)
                x = Tensor.from_host(q, x_host)
                y = Tensor.from_host(q, onehot)
                fwd = resnet18_forward_flops(n, hw)
                if kind == "infer":
                    work = fwd
                    last = {}

                    def fn():
                        with ag.no_grad():
                            last["out"] = model(ag.tensor(x, requires_grad=False))
                else:
                    work = 3.0 * fwd
                    opt = SGD(model.parameters(), lr=0.01, momentum=0.9)
                    last = {}

                    def fn():
                        tape = ag.Tape(retain_grads=False)
                        ag.set_current_tape(tape)
                        try:
                            logits = model(ag.tensor(x, requires_grad=False), tape=tape)
                            loss = functional.cross_entropy(logits, ag.tensor(y, requires_grad=False), tape=tape)
                        finally:
                            ag.set_current_tape(None)
                        tape.backward(loss)
                        opt.step()
                        opt.zero_grad()
                        last["out"] = loss

                t0 = time.perf_counter()
                fn()
                q.finish()
                first = (time.perf_counter() - t0) * 1e3
                out = last["out"].value.to_host()
                extra = {"loss": float(np.asarray(out).reshape(-1)[0])} if kind == "train" else {
                    "out_abs_mean": float(np.mean(np.abs(out)))}
                mn, md = timed(fn, q.finish, reps)
                emit(case=name, impl="netcl-0.3.2", device=h.device_name, ms=round(mn, 4), median_ms=round(md, 4),
                     first_call_ms=round(first, 1), gflops=round(work / mn / 1e6, 2), batch=n, hw=hw, **extra)
            except Exception as e:  # a case that fails is reported and the others still run
                emit(case=name, impl="netcl-0.3.2", error=repr(e)[:300])


if __name__ == "__main__":
    main()
