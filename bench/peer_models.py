"""Peer baseline for the whole-model cases: the same two networks in PyTorch eager mode, FP32.

Usage: python3 bench/peer_models.py [cuda|cpu] [--small] [--reps N] [--cases a,b] [--tf32]

The networks are written out here (no torchvision needed) to match `netcl bench`'s presets layer for layer:

- resnet18: netcl 0.3.2's ResNet18(num_classes=10, base_channels=64, use_batchnorm=True): 3x3 stem at stride 1
  with a bias, BN, ReLU; four stages of two basic blocks (conv3x3+bias, BN, ReLU, conv3x3+bias, BN, plus the
  input or a 1x1 conv+bias and BN when the stride or width changes; add; ReLU), stride 2 from the second stage;
  global average pool; Linear(512, 10).
- mobilenet_v2: the standard MobileNetV2 (width 1.0): 3x3 stride-2 stem to 32 channels, BN, ReLU6; the
  seventeen inverted residual blocks (t, c, n, s) = (1,16,1,1) (6,24,2,2) (6,32,3,2) (6,64,4,2) (6,96,3,1)
  (6,160,3,2) (6,320,1,1), depthwise 3x3, linear bottlenecks; 1x1 conv to 1280, BN, ReLU6; global average
  pool; Dropout(0.2); Linear(1280, 10). No convolution has a bias.

Cases, shapes and work match src/bench/cases_models.rs:

    <model>_infer_224 / <model>_train_224   batch 32 at 224x224   (--small: resnet18 2 at 32x32,
                                                                    mobilenet_v2 4 at 64x64)
    <model>_infer_112 / <model>_train_112   batch 128 at 112x112  (--small: resnet18 8 at 16x16,
                                                                    mobilenet_v2 16 at 32x32)

`infer`: model.eval(), torch.no_grad(), one forward. `train`: model.train(), zero_grad(set_to_none=True),
forward, cross_entropy against labels i mod 10, backward, SGD(lr=0.01, momentum=0.9).step(). Work is the
convolutions' and the Linear's FLOPs (2 per multiply-add); a training step counts three forwards.

FP32 with TF32 off (torch.backends.cuda.matmul.allow_tf32 = False, torch.backends.cudnn.allow_tf32 = False)
unless --tf32; torch.backends.cudnn.benchmark keeps its default. Timing: two warm-up calls, then --reps calls
(default 10, 3 with --small), each followed by a device synchronisation.

Prints one JSON line per case with the keys of `netcl bench`: case, impl ("torch-eager-fp32" or
"torch-eager-tf32"), device, ms (minimum), median_ms, first_call_ms, gflops, and batch, hw, plus loss (train:
the first step's loss) or out_abs_mean (infer).
"""
import json
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ beside the scripts
from peer_common import options, timed  # noqa: E402


DEVICE, SMALL, REPS, WANTED = options("cuda", 10)
TF32 = "--tf32" in sys.argv

MBV2_STAGES = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]


def shape(model, size, small):
    """(batch, side) of a case, as src/bench/cases_models.rs."""
    if not small:
        return (32, 224) if size == 224 else (128, 112)
    if model == "resnet18":
        return (2, 32) if size == 224 else (8, 16)
    return (4, 64) if size == 224 else (16, 32)


def divisible8(v):
    r = max(8, int(v + 4) // 8 * 8)
    return r + 8 if r < 0.9 * v else r


def conv_out(h, k, s):
    p = (k - 1) // 2
    return (h + 2 * p - k) // s + 1


def forward_flops(model, n, hw, classes=10):
    """Convolution and Linear FLOPs of one forward pass (as src/nn/models.rs forward_flops)."""
    total, h = 0.0, hw
    if model == "resnet18":
        c, base = 3, 64
        f = base
        total += 2.0 * n * f * conv_out(h, 3, 1) ** 2 * c * 9
        c = f
        for stage, f in enumerate([base, 2 * base, 4 * base, 8 * base]):
            for b in range(2):
                s = 2 if stage > 0 and b == 0 else 1
                o = conv_out(h, 3, s)
                total += 2.0 * n * f * o * o * c * 9 + 2.0 * n * f * o * o * f * 9
                if s != 1 or c != f:
                    total += 2.0 * n * f * conv_out(h, 1, s) ** 2 * c
                c, h = f, o
        return total + 2.0 * n * c * classes
    c = divisible8(32)
    o = conv_out(h, 3, 2)
    total += 2.0 * n * c * o * o * 3 * 9
    h = o
    for t, ch, reps, s in MBV2_STAGES:
        f = divisible8(ch)
        for i in range(reps):
            st = s if i == 0 else 1
            hid = c * t
            if t != 1:
                total += 2.0 * n * hid * h * h * c
            o = conv_out(h, 3, st)
            total += 2.0 * n * hid * o * o * 9
            total += 2.0 * n * f * o * o * hid
            c, h = f, o
    last = divisible8(1280)
    total += 2.0 * n * last * h * h * c
    return total + 2.0 * n * last * classes


def build(torch, model):
    nn = torch.nn

    class BasicBlock(nn.Module):
        def __init__(self, i, o, s):
            super().__init__()
            self.conv1, self.bn1 = nn.Conv2d(i, o, 3, s, 1, bias=True), nn.BatchNorm2d(o)
            self.conv2, self.bn2 = nn.Conv2d(o, o, 3, 1, 1, bias=True), nn.BatchNorm2d(o)
            self.proj = None
            if s != 1 or i != o:
                self.proj = nn.Sequential(nn.Conv2d(i, o, 1, s, 0, bias=True), nn.BatchNorm2d(o))

        def forward(self, x):
            h = torch.relu(self.bn1(self.conv1(x)))
            h = self.bn2(self.conv2(h))
            return torch.relu(h + (x if self.proj is None else self.proj(x)))

    class InvertedResidual(nn.Module):
        def __init__(self, i, o, s, t):
            super().__init__()
            hid = i * t
            layers = []
            if t != 1:
                layers += [nn.Conv2d(i, hid, 1, bias=False), nn.BatchNorm2d(hid), nn.ReLU6()]
            layers += [nn.Conv2d(hid, hid, 3, s, 1, groups=hid, bias=False), nn.BatchNorm2d(hid), nn.ReLU6(),
                       nn.Conv2d(hid, o, 1, bias=False), nn.BatchNorm2d(o)]
            self.body = nn.Sequential(*layers)
            self.residual = s == 1 and i == o

        def forward(self, x):
            h = self.body(x)
            return h + x if self.residual else h

    if model == "resnet18":
        layers = [nn.Conv2d(3, 64, 3, 1, 1, bias=True), nn.BatchNorm2d(64), nn.ReLU()]
        c = 64
        for stage, f in enumerate([64, 128, 256, 512]):
            for b in range(2):
                layers.append(BasicBlock(c, f, 2 if stage > 0 and b == 0 else 1))
                c = f
        layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, 10)]
        return nn.Sequential(*layers)
    c = divisible8(32)
    layers = [nn.Conv2d(3, c, 3, 2, 1, bias=False), nn.BatchNorm2d(c), nn.ReLU6()]
    for t, ch, reps, s in MBV2_STAGES:
        f = divisible8(ch)
        for i in range(reps):
            layers.append(InvertedResidual(c, f, s if i == 0 else 1, t))
            c = f
    last = divisible8(1280)
    layers += [nn.Conv2d(c, last, 1, bias=False), nn.BatchNorm2d(last), nn.ReLU6(),
               nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(0.2), nn.Linear(last, 10)]
    return nn.Sequential(*layers)


def emit(**kw):
    print(json.dumps(kw), flush=True)


def main():
    import torch

    torch.backends.cuda.matmul.allow_tf32 = TF32
    torch.backends.cudnn.allow_tf32 = TF32
    dev = torch.device(DEVICE)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    impl = "torch-eager-tf32" if TF32 else "torch-eager-fp32"
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    emit(device=name, impl=impl, torch=torch.__version__, small=SMALL, reps=REPS)
    for model_name in ("resnet18", "mobilenet_v2"):
        for size in (224, 112):
            n, hw = shape(model_name, size, SMALL)
            for kind in ("infer", "train"):
                case = f"{model_name}_{kind}_{size}"
                if WANTED and case not in WANTED:
                    continue
                try:
                    torch.manual_seed(1)
                    model = build(torch, model_name).to(dev)
                    x = torch.randn(n, 3, hw, hw, generator=torch.Generator().manual_seed(5)).to(dev)
                    y = (torch.arange(n) % 10).to(dev)
                    fwd = forward_flops(model_name, n, hw)
                    last = {}
                    if kind == "infer":
                        model.eval()
                        work = fwd

                        def step():
                            with torch.no_grad():
                                last["out"] = model(x)
                    else:
                        model.train()
                        work = 3.0 * fwd
                        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

                        def step():
                            opt.zero_grad(set_to_none=True)
                            loss = torch.nn.functional.cross_entropy(model(x), y)
                            loss.backward()
                            opt.step()
                            last["out"] = loss.detach()

                    t0 = time.perf_counter()
                    step()
                    sync()
                    first = (time.perf_counter() - t0) * 1e3
                    out = last["out"].float().cpu()
                    extra = {"loss": float(out)} if kind == "train" else {"out_abs_mean": float(out.abs().mean())}
                    ms, median = timed(step, sync, REPS)
                    emit(case=case, impl=impl, device=name, ms=round(ms, 4), median_ms=round(median, 4),
                         first_call_ms=round(first, 1), gflops=round(work / ms / 1e6, 1), batch=n, hw=hw, **extra)
                except Exception as e:  # a failing case is reported; the others still run
                    emit(case=case, impl=impl, error=repr(e)[:300])


if __name__ == "__main__":
    main()
