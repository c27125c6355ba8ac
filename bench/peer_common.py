"""Helpers shared by the peer scripts (bench/peer_models.py, bench/peer_models_netcl.py, bench/peer_matmul_tc.py,
bench/peer_gemm_numpy.py) and the netcl 0.3.2 ResNet18 fixture script (tests/fixtures/netcl_resnet18.py)."""
import sys
import time


# The GEMM shape cases of `netcl bench` (src/bench/cases_gemm.rs): (case, (batch, m, k, n), the same under
# --small).
GEMM_SHAPES = [
    ("matmul_8192", (1, 8192, 8192, 8192), (1, 1024, 1024, 1024)),
    ("matmul_odd_4097", (1, 4097, 4093, 4095), (1, 513, 509, 511)),
    ("matmul_1000", (1, 1000, 1000, 1000), (1, 1000, 1000, 1000)),
    ("bmm_64x512", (64, 512, 512, 512), (8, 256, 256, 256)),
    ("bmm_96x1024x64", (96, 1024, 64, 1024), (8, 256, 64, 256)),
]


def options(default_device, default_reps):
    """The command line shared by the peers: `[DEVICE] [--small] [--reps N] [--cases a,b]`, as
    (device, small, reps, wanted case names or None)."""

    def value(name):
        if name in sys.argv:
            i = sys.argv.index(name)
            if i + 1 < len(sys.argv):
                return sys.argv[i + 1]
        return None

    small = "--small" in sys.argv
    reps = int(value("--reps") or (3 if small else default_reps))
    takes_value = ("--reps", "--cases")
    positional = [a for i, a in enumerate(sys.argv[1:], 1) if not a.startswith("--") and sys.argv[i - 1] not in takes_value]
    wanted = value("--cases")
    return (positional[0] if positional else default_device), small, reps, (wanted.split(",") if wanted else None)


def timed(fn, sync, reps):
    """Two warm-up calls, then `reps` timed calls of `fn` each followed by `sync`: (minimum, median) in ms."""
    for _ in range(2):
        fn()
        sync()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        sync()
        ts.append((time.perf_counter() - t0) * 1e3)
    ts.sort()
    return ts[0], ts[len(ts) // 2]


def patch_netcl032_copies():
    """Lets netcl 0.3.2 fill pooled tensors with the PyOpenCL installed here.

    netcl 0.3.2's initialisers (`netcl.nn.init`) and `netcl.io.checkpoint.load_params` copy exactly a tensor's
    bytes into its buffer, but `Tensor.from_shape` hands out pooled SVM allocations rounded up to a size class,
    and this PyOpenCL refuses a copy whose sizes differ ("sizes of source and destination buffer do not
    match"), so `ResNet18()` cannot even be built. The patch pads the host array to the allocation's size: the
    same values land in the same place."""
    import numpy as np
    import pyopencl as cl
    from netcl.io import checkpoint
    from netcl.nn import init

    original = init._fill_tensor

    def fill(tensor, data):
        buf = getattr(tensor, "buffer", None)
        size = getattr(buf, "size", None)
        if isinstance(buf, cl.SVM) and size and size != data.size * 4:
            host = np.zeros(size // 4, dtype=np.float32)
            host[: data.size] = np.asarray(data, dtype=np.float32).reshape(-1)
            cl.enqueue_copy(tensor.queue, buf, host).wait()
        else:
            original(tensor, data)

    init._fill_tensor = fill
    checkpoint._copy_array_to_tensor = lambda queue, tensor, array: fill(tensor, array)
    return fill
