"""RMSNorm [4096, 4096] f32 and bf16, one thread, op.run from memory (a 600 MB read before each call),
out= and in place, x and y on a 64-byte line (off 0) or 16 bytes into one (off 16, where NumPy puts a
large array); x and y lie at the same offset in their pages, as two large NumPy arrays do. Min of 3
calls, 3 rounds. Run with PYTHONPATH at the tree to measure (command.sh)."""
import time, numpy as np, ml_dtypes
from ropegen.bench.suites import llama3_suite
ops = {o.name: o for o in llama3_suite(("f32", "bf16"))}
N = 4096
flush = np.ones(600 << 20, np.uint8)
def at(shape, off, dt):
    n = int(np.prod(shape)) * np.dtype(dt).itemsize
    raw = np.empty(n + 8192, np.uint8)
    base = (-raw.ctypes.data) % 4096
    return raw[base + off: base + off + n].view(dt).reshape(shape)
rng = np.random.default_rng(0)
for name, dt in (("rmsnorm_4096_f32", np.float32), ("rmsnorm_4096_bf16", ml_dtypes.bfloat16)):
    op = ops[name]
    x0 = rng.standard_normal((N, 4096)).astype(dt); w = rng.standard_normal(4096).astype(dt)
    res = {}
    for rnd in range(3):
        for off in (0, 16):
            for mode in ("out", "inplace"):
                x = at(x0.shape, off, dt); x[...] = x0
                y = at(x0.shape, off, dt)
                best = 1e9
                for _ in range(3):
                    if mode == "inplace": x[...] = x0
                    flush.sum(); t = time.perf_counter()
                    if mode == "out": op.run(x, w, backend="c", threads=1, out=y)
                    else: op.run(x, w, backend="c", threads=1, inplace=True)
                    best = min(best, time.perf_counter() - t)
                res.setdefault((off, mode), []).append(best * 1e3)
    for k, v in res.items(): print(name, k, " ".join(f"{t:.2f}" for t in v))
