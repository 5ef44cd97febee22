"""Measure ropegen's NumPy backend against a straightforward NumPy rotate_half RoPE (issue 2's 2x bar).

Run: python bench/numpy_rotate_half.py [--json bench/results/numpy.json]
Shape: 4096 tokens, 32 q heads, 8 k heads, head 128, f32, positions 0..4095, NeoX pairs.
"""
from __future__ import annotations

import argparse
import json
import platform
import time

import numpy as np

import ropegen

SPEC = """
rope cached {
    in q: f32[tokens=T, heads=32, head_dim=128]
    in k: f32[tokens=T, heads=8, head_dim=128]
    in pos: i64[T]
    in cos: f32[P, 64]
    in sin: f32[P, 64]
    out q_rot = rotate(q)
    out k_rot = rotate(k)
    pairing = neox
    positions = pos
    angles = table(cos = cos, sin = sin)
}
rope computed {
    in q: f32[tokens=T, heads=32, head_dim=128]
    in k: f32[tokens=T, heads=8, head_dim=128]
    in pos: i64[T]
    out q_rot = rotate(q)
    out k_rot = rotate(k)
    pairing = neox
    positions = pos
    angles = computed(base = 500000)
}
"""


def rotate_half(x: np.ndarray) -> np.ndarray:
    half = x.shape[-1] // 2
    return np.concatenate((-x[..., half:], x[..., :half]), axis=-1)


def hf_style(q, k, pos, cos, sin):
    """The usual Hugging Face form: duplicated cos/sin, x * cos + rotate_half(x) * sin."""
    c = np.concatenate((cos[pos], cos[pos]), axis=-1)[:, None, :]
    s = np.concatenate((sin[pos], sin[pos]), axis=-1)[:, None, :]
    return q * c + rotate_half(q) * s, k * c + rotate_half(k) * s


def best_of(fn, repeats: int) -> float:
    fn()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", default=None)
    ap.add_argument("--repeats", type=int, default=9)
    args = ap.parse_args()
    prog = ropegen.compile(SPEC)
    rng = np.random.default_rng(0)
    T = 4096
    q = rng.standard_normal((T, 32, 128), dtype=np.float32)
    k = rng.standard_normal((T, 8, 128), dtype=np.float32)
    pos = np.arange(T, dtype=np.int64)
    inv = 500000.0 ** (-np.arange(0, 128, 2) / 128)
    angle = np.arange(8192)[:, None] * inv
    cos, sin = np.cos(angle).astype(np.float32), np.sin(angle).astype(np.float32)
    ref = hf_style(q, k, pos, cos, sin)
    got = prog["cached"](q, k, pos, cos, sin)
    assert max(float(np.abs(a - b).max()) for a, b in zip(ref, got)) < 1e-5
    nbytes = 2 * (q.nbytes + k.nbytes)
    times = {
        "hf_rotate_half": best_of(lambda: hf_style(q, k, pos, cos, sin), args.repeats),
        "ropegen_numpy_cached": best_of(lambda: prog["cached"](q, k, pos, cos, sin), args.repeats),
        "ropegen_numpy_computed": best_of(lambda: prog["computed"](q, k, pos), args.repeats),
    }
    result = {
        "command": "python bench/numpy_rotate_half.py --json bench/results/numpy.json",
        "shape": "T=4096, q heads 32, k heads 8, head 128, f32",
        "numpy": np.__version__, "machine": platform.machine(),
        "results": {name: {"min_ms": t * 1e3, "gbps": nbytes / t / 1e9,
                           "speedup_vs_rotate_half": times["hf_rotate_half"] / t}
                    for name, t in times.items()},
    }
    for name, r in result["results"].items():
        print(f"{name:24s} {r['min_ms']:8.1f} ms {r['gbps']:6.2f} GB/s  x{r['speedup_vs_rotate_half']:.2f}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=2, sort_keys=True)
            f.write("\n")


if __name__ == "__main__":
    main()
