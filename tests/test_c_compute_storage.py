"""`compute = storage` kernels (f16 / bf16 arithmetic, every product and sum rounded onto the storage
grid) in the C backend's AVX2 / AVX-512 variants, whose pair loops round in 32-bit lanes
(rg_grid_f16 / rg_grid_bf16) so that they vectorise: the same bits as the portable baseline's
rg_round_f16 / rg_round_bf16 for every example operator, streamed or not, on clean inputs and on
inputs with NaN, infinity, huge and subnormal values; and rg_grid_f16 against rg_round_f16 on many
bit patterns (every f32 near each f16 value and its ties, both signs, every NaN class).
"""
from __future__ import annotations

import ctypes
import platform

import ml_dtypes
import numpy as np
import pytest

import ropegen
from ropegen.backends.c import build as cbuild
from ropegen.backends.c.backend import CBackend
from ropegen.ops.inputs import CASES, make_inputs
from ropegen.render import render
from tests.test_c_backend import EXAMPLES

BACKEND = CBackend()

pytestmark = [
    pytest.mark.skipif(BACKEND.unavailable() is not None, reason=str(BACKEND.unavailable())),
]

OPS = [op for path in EXAMPLES for op in ropegen.compile(path)
       if op.kind == "rope" and op.plan.compute_storage_rounding and op.plan.out_dtype is None
       and op.plan.storage.name in ("f16", "bf16")]
ISAS = ("base", "avx2", "")        # "": the best this CPU runs (AVX-512 where it has it)


def _same_bits(a: np.ndarray, b: np.ndarray, nan_inputs: bool) -> bool:
    """Bit for bit; where NaNs arise an operation on two NaNs returns the one the compiler made its first
    operand (x86), so there the NaN outputs agree in place only, not in sign (as in
    tests/test_head_norm_speedpath.py; the variants differed so before this path too)."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    ua, ub = a.view(np.uint16), b.view(np.uint16)
    if not nan_inputs:
        return np.array_equal(ua, ub)
    na, nb = np.isnan(a.astype(np.float32)), np.isnan(b.astype(np.float32))
    return np.array_equal(na, nb) and np.array_equal(ua[~na], ub[~nb])


def _specials(dtype) -> list[float]:
    fin = ml_dtypes.finfo(dtype)        # NumPy's finfo knows no bfloat16
    return [np.nan, np.inf, -np.inf, float(fin.max), -float(fin.max), float(fin.smallest_subnormal),
            -float(fin.smallest_subnormal) * 3, float(fin.smallest_normal), 0.0, -0.0, float(fin.max) / 2]


def _poisoned(op, arrays: dict[str, np.ndarray], with_nan: bool) -> dict[str, np.ndarray]:
    """The storage-typed inputs with special values spread over them (NaN only where with_nan)."""
    out = dict(arrays)
    rng = np.random.default_rng(5)
    for name, a in arrays.items():
        if a.dtype.itemsize != 2 or a.size == 0:
            continue
        vals = [v for v in _specials(a.dtype) if with_nan or not np.isnan(v)]
        b = np.array(a, copy=True).reshape(-1)
        at = rng.choice(b.size, size=min(b.size, 3 * len(vals)), replace=False)
        b[at] = np.resize(np.array(vals, dtype=np.float32), at.size).astype(a.dtype)
        if with_nan:     # NaNs with payloads, the largest quiet and the smallest signalling, both signs:
            # a rounding without the NaN select would carry the first into the sign (-0)
            b.view(np.uint16)[at[:4]] = np.array([0x7fff, 0xffff, 0x7c01, 0xfc01] if a.dtype == np.float16
                                                 else [0x7fff, 0xffff, 0x7f81, 0xff81], np.uint16)
        out[name] = b.reshape(a.shape)
    return out


def test_the_compute_storage_examples_exist():
    names = {op.name for op in OPS}
    assert {"atb_coeff4_fp16", "atb_coeff2_bf16", "qwen3_qk_norm_rope"} <= names, sorted(names)
    assert {"f16", "bf16"} <= {op.plan.storage.name for op in OPS}


@pytest.mark.parametrize("op", OPS, ids=[op.name for op in OPS])
@pytest.mark.parametrize("inputs", ["clean", "specials", "NaN"])
def test_every_variant_and_streaming_give_the_same_bits(op, inputs, monkeypatch):
    if platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("AVX2 / AVX-512 are x86 extensions")
    seen_special = False
    for i, case in enumerate(CASES):
        arrays = make_inputs(op.ir, case, seed=900 + i)
        if inputs != "clean":
            arrays = _poisoned(op, arrays, inputs == "NaN")
        args = [arrays[n] for n in op.inputs]
        runs = {}
        for isa in ISAS:
            for s in ("0", "1"):
                monkeypatch.setenv("ROPEGEN_ISA", isa)
                monkeypatch.setenv("ROPEGEN_STREAM", s)
                runs[isa, s] = [np.array(a, copy=True) for a in op.run_all(*args, backend="c", threads=2)]
        for key, outs in runs.items():
            for k, (a, b) in enumerate(zip(runs["base", "0"], outs)):
                # a NaN made inside (inf - inf, 0 * inf) meets another NaN in an order the compiler picks
                nan_made = bool(np.isnan(a.astype(np.float32)).any())
                assert inputs != "clean" or not nan_made, (op.name, case.label)
                assert _same_bits(a, b, nan_made), (op.name, case.label, inputs, key, k)
        f = np.concatenate([o.astype(np.float32).ravel() for o in runs["base", "0"]])
        seen_special |= bool((~np.isfinite(f)).any())
    if inputs != "clean":
        assert seen_special, "the special inputs produced no infinity or NaN: the corners went untested"


# ---------------------------------------------------------------------------------------------
# rg_grid_f16 (templates/c/_dtypes.inc.j2) against rg_round_f16 on many bit patterns

HARNESS = r"""
#include <stdint.h>
{dtypes}
void h_grid(const float *s, float *d, int n) {{ for (int i = 0; i < n; ++i) d[i] = rg_grid_f16(s[i]); }}
void h_round(const float *s, float *d, int n) {{ for (int i = 0; i < n; ++i) d[i] = rg_round_f16(s[i]); }}
"""


def _f32_patterns() -> np.ndarray:
    """Around every f16 value's f32 image: exact, the ties, one ulp either side of them, just past
    the largest finite; plus random patterns, every NaN class (quiet, signalling, payload only below
    bit 13), both signs."""
    h = np.arange(1 << 15, dtype=np.uint32).astype(np.uint16).view(np.float16)
    base = h[np.isfinite(h)].astype(np.float32).view(np.uint32)
    mid = (h[np.isfinite(h)][:-1].astype(np.float32) / 2 + h[np.isfinite(h)][1:].astype(np.float32) / 2).view(np.uint32)
    rnd = np.random.default_rng(13).integers(0, 1 << 32, 2_000_000, dtype=np.uint64).astype(np.uint32)
    nan = np.array([0x7f800001, 0x7f801fff, 0x7f802000, 0x7fbfffff, 0x7fc00000, 0x7fffffff, 0x7f800000,
                    0x477fefff, 0x477ff000, 0x477ff001, 0x47800000], np.uint32)
    bits = np.concatenate([base, base + 1, base - 1, mid, mid - 1, mid + 1, nan, rnd])
    return np.concatenate([bits, bits ^ np.uint32(0x80000000)]).view(np.float32)


def test_grid_f16_matches_round_f16_on_many_bit_patterns():
    src = HARNESS.format(dtypes=render("c/_dtypes.inc.j2"))
    lib = cbuild.load_library(cbuild.build({"f16_grid_harness.c": src}, "f16-grid-harness"))
    x = _f32_patterns()
    got, want = np.zeros_like(x), np.zeros_like(x)
    for fn, y in (("h_grid", got), ("h_round", want)):
        getattr(lib, fn)(ctypes.c_void_p(x.ctypes.data), ctypes.c_void_p(y.ctypes.data), ctypes.c_int(x.size))
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    # and rg_round_f16 is NumPy's float16 round trip off NaN (so the pair is the reference's rounding)
    ok = ~np.isnan(x)
    with np.errstate(over="ignore"):
        f16 = x[ok].astype(np.float16)
    assert np.array_equal(want[ok].view(np.uint32), f16.astype(np.float32).view(np.uint32))
