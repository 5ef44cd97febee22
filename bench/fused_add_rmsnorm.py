"""The residual-add fusion on the C backend: vLLM's fused_add_rms_norm as one ropegen operator
(`residual = r`: h = x + r and y = rmsnorm(h), one pass over x and r) against the unfused pair a
model runs without it (NumPy's add into a preallocated h, then ropegen's RMSNorm of h), min of
interleaved runs, each timed cold as `ropegen bench` times prefill rows (after the bench's cache flush),
with the bytes each moves and the ratio to a copy of those bytes (the faster of memcpy and a
non-temporal copy, the bench's own yardstick, same threads, timed in the same rounds).

    python bench/fused_add_rmsnorm.py [--tokens 4096] [--hidden 4096] [--threads 2] [--repeats 30]
"""
import argparse
import json

import ml_dtypes
import numpy as np

import ropegen
from ropegen.bench import yardstick
from ropegen.bench.flush import Flush
from ropegen.bench.harness import interleaved

SPEC = """
rmsnorm fused_add {{
    in x:        {dt}[T, {n}]
    in residual: {dt}[T, {n}]
    in weight:   {dt}[{n}]
    out y
    out h
    residual = residual
    epsilon  = 1e-6
}}
rmsnorm plain {{
    in x:      {dt}[T, {n}]
    in weight: {dt}[{n}]
    out y
    epsilon = 1e-6
}}
"""
DTYPES = {"f32": np.float32, "bf16": ml_dtypes.bfloat16}


def best(fns, repeats, flush):
    return [min(t) for t in interleaved(fns, repeats, flush)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    out = []
    flush = None
    for dt, npt in DTYPES.items():
        prog = ropegen.compile(SPEC.format(dt=dt, n=a.hidden))
        fused, plain = prog["fused_add"], prog["plain"]
        rng = np.random.default_rng(0)
        x = rng.standard_normal((a.tokens, a.hidden)).astype(npt)
        r = rng.standard_normal((a.tokens, a.hidden)).astype(npt)
        w = rng.standard_normal(a.hidden).astype(npt)
        y, h, h2, y2 = (np.empty_like(x) for _ in range(4))
        fk, pk = fused.kernel("c"), plain.kernel("c")
        yard = yardstick.build("c")
        flush = flush or Flush(None, a.threads, yard.read)
        copies = yardstick.runners(yard, "out_of_place", 5 * x.nbytes, a.threads)   # the fused call's bytes

        def run_fused():
            fk(x, r, w, threads=a.threads, out=(y, h))

        def run_unfused():
            np.add(x, r, out=h2)
            pk(h2, w, threads=a.threads, out=(y2,))

        names = list(copies)
        t_f, t_u, *t_copies = best([run_fused, run_unfused, *copies.values()], a.repeats, flush)
        t_c = min(t_copies)
        np.testing.assert_array_equal(h.view(np.uint8), h2.view(np.uint8))   # same rounding of h
        moved_f = 5 * x.nbytes + w.nbytes             # x, r read; y, h written (+ weight)
        moved_u = 6 * x.nbytes + w.nbytes             # x, r read, h written; h read, y written
        copy_gbps = 5 * x.nbytes / t_c / 1e9
        rec = dict(dtype=dt, tokens=a.tokens, hidden=a.hidden, threads=a.threads,
                   fused_ms=t_f * 1e3, unfused_ms=t_u * 1e3, speedup=t_u / t_f,
                   fused_bytes=moved_f, unfused_bytes=moved_u, copy_gbps=copy_gbps,
                   copy_used=names[t_copies.index(t_c)],
                   fused_ratio_to_copy=(moved_f / copy_gbps / 1e9) / t_f)
        out.append(rec)
        print(f"{dt:5s} fused {t_f * 1e3:7.3f} ms ({moved_f / 1e6:.0f} MB, {rec['fused_ratio_to_copy']:.2f} of a "
              f"copy)  unfused {t_u * 1e3:7.3f} ms ({moved_u / 1e6:.0f} MB)  speed-up {t_u / t_f:.2f}x")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
