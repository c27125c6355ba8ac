"""netcl 0.3.2 training throughput on the digits CNN (same layers as netcl's `digits_cnn` preset here).
Usage: python3 peer_train.py DEVICE(gpu|auto) EPOCHS. Prints one JSON line per epoch with samples/s."""
import json, sys, time, gzip
import numpy as np
from netcl.core.device import manager
from netcl.nn.factory import build_sequential
from netcl.optim.adam import Adam
from netcl.trainer.trainer import Trainer

dev = manager.default(sys.argv[1]); q = dev.queue
epochs = int(sys.argv[2])
rows = np.loadtxt(gzip.open(sys.argv[3]), delimiter=",", dtype=np.float32)
x = (rows[:, :64].reshape(-1, 1, 8, 8) / 16.0 - 0.3) / 0.38
y = rows[:, 64].astype(np.int32)
xtr, ytr = x[:1437], y[:1437]
cfg = [
    {"type": "Conv2d", "args": {"in_channels": 1, "out_channels": 16, "kernel_size": 3, "stride": 1, "pad": 1}},
    {"type": "BatchNorm2d", "args": {"num_features": 16}}, {"type": "ReLU"},
    {"type": "MaxPool2d", "args": {"kernel_size": 2, "stride": 2}},
    {"type": "Conv2d", "args": {"in_channels": 16, "out_channels": 32, "kernel_size": 3, "stride": 1, "pad": 1}},
    {"type": "BatchNorm2d", "args": {"num_features": 32}}, {"type": "ReLU"},
    {"type": "MaxPool2d", "args": {"kernel_size": 2, "stride": 2}},
    {"type": "Flatten"},
    {"type": "Linear", "args": {"in_features": 128, "out_features": 10}},
]
model = build_sequential(q, cfg)
params = [p for layer in model.layers for p in (layer.parameters() if hasattr(layer, "parameters") else [])]
opt = Adam(params, lr=0.002)
tr = Trainer(model, opt, device_queue=q)
batches = [(xtr[i:i + 32], ytr[i:i + 32]) for i in range(0, 1437, 32)]
print(json.dumps({"device": dev.device_name, "impl": "netcl-0.3.2"}), flush=True)
for e in range(1, epochs + 1):
    t0 = time.perf_counter(); tr.fit(batches, epochs=1); q.finish(); dt = time.perf_counter() - t0
    print(json.dumps({"epoch": e, "impl": "netcl-0.3.2", "seconds": round(dt, 4), "samples_per_second": round(1437 / dt, 1)}), flush=True)
