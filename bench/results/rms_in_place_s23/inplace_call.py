"""RMSNorm [N, 4096] in place through the Python API (op.bind(..., inplace=True), one thread), x on a
64-byte line or 16 bytes into one (where NumPy places a large array), each call from memory (the bench's
cache flush first) and on x restored first (untimed: repeated in-place normalization drives the
small-scale columns to subnormals). Run from a checkout: PYTHONPATH=TREE python inplace_call.py LABEL."""
import sys
import time

import numpy as np

import ropegen
from ropegen.bench import flush as fl, inputs as bi, yardstick

label, N, R = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 4096, int(sys.argv[3]) if len(sys.argv) > 3 else 6
spec = ropegen.__file__.rsplit("/ropegen/", 1)[0] + "/bench/rmsnorm_4096.rope"
yard = yardstick.build("c")
flush = fl.Flush(threads=1, reader=yard.read)


def placed(a, off):
    raw = np.empty(a.nbytes + 4096, np.uint8)
    s = (-raw.ctypes.data) % 64 + off
    b = raw[s:s + a.nbytes].view(a.dtype).reshape(a.shape)
    b[...] = a
    return b


for op in ropegen.compile(spec):
    arrs = bi.bench_inputs(op, {"N": N})
    x, w = arrs["x"], arrs["scale"]
    cases = {}
    for off in (0, 16):
        xi = placed(x, off)
        cases[off] = (xi, op.bind(xi, w, backend="c", threads=1, inplace=True))
    times = {off: [] for off in cases}
    for r in range(R):
        for off in (cases if r % 2 == 0 else list(cases)[::-1]):
            xi, call = cases[off]
            xi[...] = x
            flush()
            t = time.perf_counter()
            call()
            times[off].append(time.perf_counter() - t)
    for off, v in times.items():
        print(f"{label} {op.name} in place, x +{off:<2d} bytes from a line: min {min(v) * 1e3:7.2f} med {np.median(v) * 1e3:7.2f} ms")
