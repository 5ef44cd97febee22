"""llama3 f32 q + k, T = 4096, one thread, op.run from memory (a 600 MB read before each call): in place
and out= (the outputs the caller's), with q, k and the outputs on a 64-byte line (off 0) or 16 bytes
into one (off 16, where NumPy puts a large array). Min of 3 calls, 4 rounds. Run with PYTHONPATH at
the tree to measure (command.sh)."""
import time, numpy as np
from ropegen.bench.suites import llama3_suite
op = [o for o in llama3_suite(("f32",)) if o.name == "llama3_8b_f32"][0]
T = 4096
flush = np.ones(600 << 20, np.uint8)
def at(shape, off):
    n = int(np.prod(shape)) * 4
    raw = np.empty(n + 8192, np.uint8)
    base = (-raw.ctypes.data) % 4096
    return raw[base + off: base + off + n].view(np.float32).reshape(shape)
rng = np.random.default_rng(0)
q0 = rng.standard_normal((T, 32, 128)).astype(np.float32); k0 = rng.standard_normal((T, 8, 128)).astype(np.float32)
pos = np.arange(T, dtype=np.int64)
res = {}
for rnd in range(4):
    for off in (0, 16):
        for mode in ("inplace", "out"):
            q, k = at(q0.shape, off), at(k0.shape, off); q[...] = q0; k[...] = k0
            outs = (at(q0.shape, off), at(k0.shape, off)) if mode == "out" else None
            best = 1e9
            for _ in range(3):
                flush.sum()
                t = time.perf_counter()
                if mode == "inplace": op.run(q, k, pos, backend="c", threads=1, inplace=True)
                else: op.run(q, k, pos, backend="c", threads=1, out=outs)
                best = min(best, time.perf_counter() - t)
            res.setdefault((off, mode), []).append(best * 1e3)
for key, v in res.items(): print(key, " ".join(f"{x:.2f}" for x in v))
