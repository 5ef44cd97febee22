"""The whole call from Python at decode size (T = 1): llama3 bf16 q[1,32,128], k[1,8,128], one position,
C backend, one thread; `op.run` and the loaded kernel's `__call__`, best of 7 x 2000 calls.

    python bench/decode_call.py [LABEL]
"""
import sys
import time

import ml_dtypes
import numpy as np

import ropegen


def main() -> None:
    op = list(ropegen.compile("examples/llama3.rope"))[0]
    q = np.random.default_rng(0).standard_normal((1, 32, 128)).astype(ml_dtypes.bfloat16)
    k = np.random.default_rng(1).standard_normal((1, 8, 128)).astype(ml_dtypes.bfloat16)
    pos = np.array([5], dtype=np.int64)
    kern = op.kernel("c")
    kern(q, k, pos, threads=1)
    best = {}
    for name, fn in (("op.run", lambda: op.run(q, k, pos, backend="c", threads=1)),
                     ("kernel()", lambda: kern(q, k, pos, threads=1))):
        ts = []
        for _ in range(7):
            t0 = time.perf_counter()
            for _ in range(2000):
                fn()
            ts.append((time.perf_counter() - t0) / 2000 * 1e6)
        best[name] = min(ts)
    label = sys.argv[1] if len(sys.argv) > 1 else ""
    print(label, ", ".join(f"{k} {v:.1f} us" for k, v in best.items()))


if __name__ == "__main__":
    main()
