"""The whole call from Python at prefill sizes: llama3 q[T,32,128] + k[T,8,128] (f32, bf16) and RMSNorm
[T, 4096] f32 on the C backend. Timed: `op.run` with the output pool (runtime/aligned.py), `op.run`
without it (every output fresh pages, as before the pool), the bound call writing preallocated
line-aligned outputs (the kernel alone, as `ropegen bench` times it), and onnxruntime's whole
`session.run` (new NumPy outputs) where it has the operator. Min over rounds, the callables
interleaved round by round, each called twice and its second call timed (the min, because a shared
machine only adds time).

    PYTHONPATH=. python bench/prefill_call.py [LABEL] [--tokens 4096 16384] [--threads 1] [--rounds N]
"""
import argparse
import gc
import time

import numpy as np

from ropegen.bench.suites import llama3_suite
from ropegen.runtime import aligned

from decode_call import inputs, onnx_run


def best_ms(fns: dict, rounds: int) -> dict:
    """Each round calls each callable twice and times the second call: its steady state (the pooled
    op.run takes back the buffers its first call left; the unpooled one dropped them)."""
    best = {k: float("inf") for k in fns}
    for _ in range(rounds):
        for name, f in fns.items():
            f()
            t0 = time.perf_counter()
            f()
            best[name] = min(best[name], (time.perf_counter() - t0) * 1e3)
    return best


def without_pool(f):
    def call():
        limit, aligned._POOL.limit = aligned._POOL.limit, 0
        aligned.release()
        try:
            f()
        finally:
            aligned._POOL.limit = limit
    return call


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("label", nargs="?", default="")
    ap.add_argument("--tokens", type=int, nargs="+", default=[4096, 16384])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=10)
    a = ap.parse_args()
    ops = {o.name: o for o in llama3_suite(("f32", "bf16"))}
    rng = np.random.default_rng(0)
    th = a.threads
    for tokens in a.tokens:
        for name in ("llama3_8b_f32", "llama3_8b_bf16", "rmsnorm_4096_f32"):
            op = ops[name]
            arrays = inputs(op, tokens, rng)
            args = [arrays[n] for n in op.inputs]
            outs = tuple(aligned._on_a_line(o.shape, o.dtype) for o in op.run_all(*args, backend="c", threads=th))
            nbytes = sum(x.nbytes for x in args) + sum(o.nbytes for o in outs)
            fns = {"op.run": lambda: op.run(*args, backend="c", threads=th),
                   "op.run, no pool": without_pool(lambda: op.run(*args, backend="c", threads=th)),
                   "bound(out=)": op.bind(*args, backend="c", threads=th, out=outs)}
            ort = onnx_run(op, arrays, th)
            if ort is not None:
                fns["ort session.run"] = ort
            best = best_ms(fns, a.rounds)
            print(a.label, f"{name} T={tokens} threads={th} ({nbytes / 2**20:.0f} MiB moved):",
                  ", ".join(f"{k} {v:.2f} ms ({nbytes / v / 1e6:.0f} GB/s)" for k, v in best.items()))
            del fns, ort, outs
            gc.collect()


if __name__ == "__main__":
    main()
