"""The whole call from Python at decode sizes (T = 1 and 16): llama3 q[T,32,128] + k[T,8,128] (bf16 and f32)
and RMSNorm [T, 4096] f32 on the C backend, one thread. Timed: `op.run` (NumPy arrays in, outputs
out), `op.run` writing into arrays the caller made (out=, NumPy's np.empty_like), the bound call
`op.bind(...)()` on its bound arrays (outputs bound with out=), the bound call on arrays passed each
call (`bound(q, k, pos)`, new outputs), the out= bound call on arrays and outputs passed each call
(`bound(q, k, pos, out=...)`), and onnxruntime's whole `session.run` on the
same shapes where it has the operator (no bf16 RotaryEmbedding). Min over rounds of 300 calls,
the callables interleaved round by round (the min, because a shared machine only adds time).

    PYTHONPATH=. python bench/decode_call.py [LABEL] [--rounds N]
"""
import argparse
import time

import ml_dtypes
import numpy as np

from ropegen.bench.peers.onnxruntime import onnx_peer_model
from ropegen.bench.suites import llama3_suite


def best_us(fns: dict, rounds: int, calls: int = 300) -> dict:
    for f in fns.values():
        f()
    best = {k: float("inf") for k in fns}
    for _ in range(rounds):
        for name, f in fns.items():
            t0 = time.perf_counter()
            for _ in range(calls):
                f()
            best[name] = min(best[name], (time.perf_counter() - t0) / calls * 1e6)
    return best


def onnx_run(op, arrays: dict, threads: int = 1):
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    built = onnx_peer_model(op, arrays)
    if isinstance(built, str):
        return None
    model, feeds, _ = built
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads, so.log_severity_level = threads, 1, 3
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")    # as ropegen bench's peer
    try:
        sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        feeds = {n: np.ascontiguousarray(a) for n, a in feeds.items()}
        sess.run(None, feeds)
    except Exception:   # no kernel for this dtype
        return None
    return lambda: sess.run(None, feeds)


def inputs(op, tokens: int, rng) -> dict:
    dt = ml_dtypes.bfloat16 if op.name.endswith("bf16") else np.float32
    if op.kind == "rmsnorm":
        return {"x": rng.standard_normal((tokens, 4096)).astype(dt), "scale": rng.standard_normal(4096).astype(dt)}
    return {"q": rng.standard_normal((tokens, 32, 128)).astype(dt), "k": rng.standard_normal((tokens, 8, 128)).astype(dt),
            "positions": np.arange(100, 100 + tokens, dtype=np.int64)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("label", nargs="?", default="")
    ap.add_argument("--rounds", type=int, default=40)
    a = ap.parse_args()
    ops = {o.name: o for o in llama3_suite(("f32", "bf16"))}
    rng = np.random.default_rng(0)
    for tokens in (1, 16):
        for name in ("llama3_8b_bf16", "llama3_8b_f32", "rmsnorm_4096_f32"):
            op = ops[name]
            arrays = inputs(op, tokens, rng)
            args = [arrays[n] for n in op.inputs]
            outs = op.run_all(*args, backend="c", threads=1)
            bound_out = op.bind(*args, backend="c", threads=1, out=outs)
            bound = op.bind(*args, backend="c", threads=1)
            given = tuple(np.empty_like(o) for o in outs)
            fns = {"op.run": lambda: op.run(*args, backend="c", threads=1),
                   "op.run out=": lambda: op.run(*args, backend="c", threads=1, out=given),
                   "bound()": bound_out,
                   "bound(arrays)": lambda: bound(*args),
                   "bound(arrays, out=)": lambda: bound_out(*args, out=given)}
            ort = onnx_run(op, arrays)
            if ort is not None:
                fns["ort session.run"] = ort
            best = best_us(fns, a.rounds)
            print(a.label, f"{name} T={tokens}:", ", ".join(f"{k} {v:.2f} us" for k, v in best.items()))


if __name__ == "__main__":
    main()
