"""fp8 outputs on the C backend: the conversions of templates/c/_dtypes.inc.j2 (float and double to
f8e4m3 / f8e5m2) against an exact rule and ml_dtypes on every rounding-critical bit pattern, and the
quantized operators bit-identical to the NumPy backend on random data and at the edges (ties between
fp8 neighbours, normal and subnormal, the saturation threshold, infinities, NaN, -0.0), streamed or not.

ml_dtypes (0.6) rounds a double to fp8 through float32, twice: the C conversion from double is held to
the exact rule (one rounding) instead, as the NumPy backend's rint-based rounding is; a rope with
`compute = f64` shows the difference.
"""
from __future__ import annotations

import ctypes
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import ropegen
from ropegen.backends.c import build as cbuild
from ropegen.backends.c.backend import CBackend
from ropegen.ir.dtypes import DTYPES
from ropegen.ops.inputs import CASES, make_inputs
from ropegen.render import render

pytestmark = pytest.mark.skipif(CBackend().unavailable() is not None, reason=str(CBackend().unavailable()))

# name -> (ml_dtypes type, mantissa bits, smallest normal exponent, the NaN code ml_dtypes writes)
FORMATS = {"f8e4m3": (ml_dtypes.float8_e4m3fn, 3, -6, 0x7f), "f8e5m2": (ml_dtypes.float8_e5m2, 2, -14, 0x7e)}

HARNESS = """
#include <stdint.h>
{dtypes}
#define H(name, from, fn) \\
    void name(const from *x, uint8_t *y, int64_t n) {{ for (int64_t i = 0; i < n; ++i) y[i] = fn(x[i]); }}
H(h_f32_to_f8e4m3, float, rg_store_f32_f8e4m3)
H(h_f32_to_f8e5m2, float, rg_store_f32_f8e5m2)
H(h_f64_to_f8e4m3, double, rg_store_f64_f8e4m3)
H(h_f64_to_f8e5m2, double, rg_store_f64_f8e5m2)
"""


@pytest.fixture(scope="module")
def convert():
    lib = cbuild.load_library(cbuild.build({"fp8.c": HARNESS.format(dtypes=render("c/_dtypes.inc.j2", fp8=True))},
                                           "fp8-harness"))

    def call(x: np.ndarray, fmt: str) -> np.ndarray:
        x = np.ascontiguousarray(x)
        y = np.empty(x.shape, dtype=np.uint8)
        fn = getattr(lib, f"h_{'f32' if x.dtype == np.float32 else 'f64'}_to_{fmt}")
        fn(ctypes.c_void_p(x.ctypes.data), ctypes.c_void_p(y.ctypes.data), ctypes.c_int64(x.size))
        return y
    return call


def exact(x: np.ndarray, fmt: str) -> np.ndarray:
    """The contract's fp8(x), computed another way: |x| scaled to units of its fp8 step (exact, a power
    of two) and rounded once by np.rint (nearest even); the code is that of the exact fp8 value."""
    t, mbits, emin, nan = FORMATS[fmt]
    big = DTYPES[fmt].max_finite
    with np.errstate(all="ignore"):
        d = np.asarray(x, dtype=np.float64)    # float32 -> float64 is exact
        a = np.abs(d)
        e = np.maximum(np.frexp(np.where(np.isfinite(a) & (a > 0), a, 1.0))[1] - 1, emin)
        step = np.ldexp(1.0, e - mbits)
        v = np.where(a < big, np.rint(a / step) * step, big)    # at most `big`: exact in the fp8 type
        code = v.astype(t).view(np.uint8)
    code = np.where(np.isnan(d), nan, code)
    return (code | np.where(np.signbit(d), 0x80, 0)).astype(np.uint8)


def numpy_way(x: np.ndarray, fmt: str) -> np.ndarray:
    """ml_dtypes' cast of the value clipped to the finite range (one rounding from float32 only)."""
    big = DTYPES[fmt].max_finite
    with np.errstate(all="ignore"):
        return np.clip(x, -big, big).astype(FORMATS[fmt][0]).view(np.uint8)


def edges(fmt: str) -> np.ndarray:
    """Every finite fp8 value, the ties between neighbours and a float32 step either side of each,
    around the saturation threshold, infinities, NaNs, signed zeros, both signs."""
    t, mbits, emin, _ = FORMATS[fmt]
    vals = np.unique(np.arange(128, dtype=np.uint8).view(t).astype(np.float64))
    vals = vals[np.isfinite(vals)]
    mids = (vals[:-1] + vals[1:]) / 2
    big = DTYPES[fmt].max_finite
    top = np.ldexp(1.0, int(np.floor(np.log2(big))) - mbits)     # the step at the top binade
    named = [big, big + top / 2, big + top, big + 1.5 * top, big * 1.0001, 1e30, 3e38,
             np.ldexp(1.0, emin - mbits), np.ldexp(1.0, emin - mbits - 1), 3 * np.ldexp(1.0, emin - mbits - 1),
             np.ldexp(1.0, emin) - np.ldexp(1.0, emin - mbits - 1), 1e-30, 1e-45]
    x = np.concatenate([vals, mids, named]).astype(np.float32)
    x = np.concatenate([x, np.nextafter(x, np.float32(np.inf)), np.nextafter(x, np.float32(0))])
    x = np.concatenate([x, -x, np.array([np.inf, -np.inf, np.nan, -np.nan, 0.0, -0.0], dtype=np.float32)])
    return x.astype(np.float32)


def f32_patterns() -> np.ndarray:
    """Every sign, exponent and top 11 mantissa bits (where fp8 rounds) with the low 12 bits exact,
    1 (sticky), a tie's 0x800 and all ones; float32 NaN payloads too."""
    hi = np.arange(1 << 20, dtype=np.uint32) << np.uint32(12)
    lows = [0x000, 0x001, 0x800, 0xfff]
    return np.concatenate([hi | np.uint32(lo) for lo in lows]).view(np.float32)


# ---------------------------------------------------------------------------------------------
# the conversion helpers

@pytest.mark.parametrize("fmt", list(FORMATS))
def test_f32_conversion_matches_the_exact_rule_and_ml_dtypes(convert, fmt):
    for x in (edges(fmt), f32_patterns()):
        got = convert(x, fmt)
        assert np.array_equal(got, exact(x, fmt))
        assert np.array_equal(got, numpy_way(x, fmt))


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_named_edges(convert, fmt):
    """A few codes written out, so that a shared mistake of the rule and the helper shows."""
    want = {"f8e4m3": {448.0: 0x7e, 464.0: 0x7e, 480.0: 0x7e, 1e9: 0x7e, np.inf: 0x7e, -np.inf: 0xfe,
                       1.0625: 0x38, 1.1875: 0x3a, 2.0 ** -9: 0x01, 2.0 ** -10: 0x00, 3 * 2.0 ** -10: 0x02,
                       5 * 2.0 ** -10: 0x02, -2.0 ** -10: 0x80, -0.0: 0x80, 15 * 2.0 ** -10: 0x08},
            "f8e5m2": {57344.0: 0x7b, 61440.0: 0x7b, 65536.0: 0x7b, np.inf: 0x7b, -np.inf: 0xfb, 1.125: 0x3c,
                       1.375: 0x3e, 2.0 ** -16: 0x01, 2.0 ** -17: 0x00, 3 * 2.0 ** -17: 0x02, -0.0: 0x80,
                       7 * 2.0 ** -17: 0x04}}[fmt]
    for v, code in want.items():
        for dt in (np.float32, np.float64):
            assert convert(np.array([v], dtype=dt), fmt)[0] == code, (fmt, v, dt)
    nan = FORMATS[fmt][3]
    assert list(convert(np.array([np.nan, -np.nan], dtype=np.float32), fmt)) == [nan, 0x80 | nan]
    assert list(convert(np.array([np.nan, -np.nan]), fmt)) == [nan, 0x80 | nan]


def f64_samples(fmt: str) -> np.ndarray:
    """The float32 edges in double, and near-ties a detour through float32 would make exact ties
    (the double rounding the contract forbids), plus random doubles and NaN payloads."""
    t = FORMATS[fmt][0]
    vals = np.unique(np.arange(128, dtype=np.uint8).view(t).astype(np.float64))
    vals = vals[np.isfinite(vals)]
    mids = (vals[:-1] + vals[1:]) / 2
    rng = np.random.default_rng(5)
    parts = [edges(fmt).astype(np.float64), mids * (1 + 2.0 ** -40), mids * (1 - 2.0 ** -40),
             mids + 2.0 ** -160, rng.standard_normal(1 << 18) * np.exp2(rng.integers(-30, 20, 1 << 18)),
             rng.integers(0, 1 << 63, 1 << 16, dtype=np.uint64).view(np.float64),
             np.array([0x7ff0000000000001, 0x7ff8000000000001, 0xfff0000100000000, 0x7fefffffffffffff,
                       0x0000000000000001], dtype=np.uint64).view(np.float64)]
    x = np.concatenate(parts)
    return np.concatenate([x, -x])


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_f64_conversion_rounds_once(convert, fmt):
    x = f64_samples(fmt)
    got = convert(x, fmt)
    assert np.array_equal(got, exact(x, fmt))
    # where float32 holds the double exactly, one rounding is ml_dtypes' too
    with np.errstate(all="ignore"):
        same = x.astype(np.float32).astype(np.float64) == x
    assert np.array_equal(got[same], numpy_way(x[same], fmt))
    # a just-above-tie double: through float32 it would be the tie and round down to even
    assert convert(np.array([1.0625 * (1 + 2.0 ** -40)]), "f8e4m3")[0] == 0x39


# ---------------------------------------------------------------------------------------------
# the operators

EXAMPLE = list(ropegen.compile(Path(__file__).resolve().parent.parent / "examples" / "fp8_outputs.rope"))


def _bits(outs) -> list[bytes]:
    return [np.ascontiguousarray(o).view(np.uint8).tobytes() for o in outs]


@pytest.mark.parametrize("op", EXAMPLE, ids=[o.name for o in EXAMPLE])
def test_examples_bit_identical_to_numpy(op, monkeypatch):
    for i, case in enumerate(CASES):
        arrays = make_inputs(op.ir, case, seed=40 + i)
        args = [arrays[n] for n in op.inputs]
        want = _bits(op.run_all(*args, backend="numpy"))
        for isa, stream, threads in (("", "", 1), ("base", "1", 2), ("", "1", 3), ("avx2", "0", 1)):
            monkeypatch.setenv("ROPEGEN_ISA", isa)
            monkeypatch.setenv("ROPEGEN_STREAM", stream)
            assert _bits(op.run_all(*args, backend="c", threads=threads)) == want, (case.label, isa, stream)


ROPE_EDGES = """
rope edges {
    in q:         f32[tokens=T, heads=3, head_dim=64]
    in k:         f32[tokens=T, heads=2, head_dim=64]
    in positions: i64[T]
    in q_scale:   f32[1]
    in k_scale:   f32[2]
    out q_rot = rotate(q)
    out k_out = copy(k)
    pairing   = neox
    rotary_dim = 48
    positions = positions
    angles    = computed(base = 10000)
    dtype     = FMT
    quant_scale = [q_scale, k_scale]
    COMPUTE
}
"""


def _spread(values: np.ndarray, n: int) -> np.ndarray:
    return np.resize(values, n).astype(np.float32)


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")    # inf and huge edge values times the scale
@pytest.mark.parametrize("fmt", list(FORMATS))
def test_rope_edges_at_position_zero(fmt, monkeypatch):
    """Position 0: cos = 1 and sin = 0, so the rotated q is q (partner 1.0: x + (-1 * 0) is x, -0.0
    included); pass-through elements and the copy are the input. With scales 1 each stored code is
    fp8(q) -- and the NumPy backend's."""
    op = next(iter(ropegen.compile(ROPE_EDGES.replace("FMT", fmt).replace("COMPUTE", ""))))
    e = edges(fmt)
    T = -(-e.size // (3 * 40))
    q = np.ones((T, 3, 64), dtype=np.float32)
    q[:, :, :24] = _spread(e, T * 3 * 24).reshape(T, 3, 24)            # rotated, partners [24, 48) = 1
    q[:, :, 48:] = _spread(e[::-1], T * 3 * 16).reshape(T, 3, 16)      # passed through
    k = _spread(e[::7], T * 2 * 64).reshape(T, 2, 64)
    args = dict(q=q, k=k, positions=np.zeros(T, dtype=np.int64), q_scale=np.ones(1, np.float32),
                k_scale=np.ones(2, np.float32))
    args = [args[n] for n in op.inputs]
    want = op.run_all(*args, backend="numpy")
    assert np.array_equal(want[0].view(np.uint8)[:, :, :24], exact(q[:, :, :24], fmt))
    assert np.array_equal(want[0].view(np.uint8)[:, :, 48:], exact(q[:, :, 48:], fmt))
    assert np.array_equal(want[1].view(np.uint8), exact(k, fmt))
    for stream in ("0", "1"):      # the non-temporal path writes through an fp8 buffer too
        monkeypatch.setenv("ROPEGEN_STREAM", stream)
        assert _bits(op.run_all(*args, backend="c", threads=2)) == _bits(want)
    # per-head scales: head h of k times k_scale[h]
    args[op.inputs.index("k_scale")] = np.array([0.5, 4.0], dtype=np.float32)
    got = op.run_all(*args, backend="c")[1].view(np.uint8)
    assert np.array_equal(got, exact(k.astype(np.float64) * np.array([0.5, 4.0])[None, :, None], fmt))
    assert _bits(op.run_all(*args, backend="numpy")) == _bits(op.run_all(*args, backend="c"))


def test_rope_compute_f64_rounds_the_double_product_once():
    """compute = f64: v * s in double, rounded once. (1 + 2^-23) * (1.0625 - 2^-23) lies just above the
    tie 1.0625 between 1 and 1.125: 1.125 (0x39); rounded to float32 first it would be the tie, 1.0."""
    op = next(iter(ropegen.compile(ROPE_EDGES.replace("FMT", "f8e4m3").replace("COMPUTE", "compute = f64"))))
    q = np.full((1, 3, 64), 1 + 2.0 ** -23, dtype=np.float32)
    args = dict(q=q, k=np.zeros((1, 2, 64), np.float32), positions=np.zeros(1, dtype=np.int64),
                q_scale=np.array([1.0625 - 2.0 ** -23], np.float32), k_scale=np.ones(2, np.float32))
    args = [args[n] for n in op.inputs]
    got = op.run_all(*args, backend="c")[0].view(np.uint8)
    assert np.all(got == 0x39)        # rotated at position 0 (q exactly) and passed through alike
    assert _bits(op.run_all(*args, backend="c")) == _bits(op.run_all(*args, backend="numpy"))


RMS_EDGES = """
rmsnorm edges {
    in x:      XT[T, 64]
    in weight: XT[64]
    in qs:     f32[1]
    out y
    epsilon = 0
    dtype = FMT
    quant_scale = qs
}
"""


@pytest.mark.parametrize("xt", ["f32", "bf16"])
@pytest.mark.parametrize("fmt", list(FORMATS))
def test_rmsnorm_edges(xt, fmt, monkeypatch):
    """Rows of ones with epsilon 0 normalize to exactly 1, so y's unquantized value is the weight; with
    scale 1 the stored code is fp8(weight). bf16 takes the fast row path (finite weights) as well."""
    op = next(iter(ropegen.compile(RMS_EDGES.replace("XT", xt).replace("FMT", fmt))))
    npt = np.float32 if xt == "f32" else ml_dtypes.bfloat16
    e = edges(fmt)
    e = e[e.astype(npt).astype(np.float32).view(np.uint32) == e.view(np.uint32)]   # exact in x's type
    finite = e[np.isfinite(e)]
    for w in (e, finite):           # a NaN or infinite weight leaves the fast path
        rows = -(-w.size // 64)
        for r in range(rows):
            weight = _spread(np.roll(w, -64 * r), 64)
            arrays = dict(x=np.ones((3, 64), dtype=npt), weight=weight.astype(npt), qs=np.ones(1, np.float32))
            args = [arrays[n] for n in op.inputs]
            want = op.run_all(*args, backend="numpy")
            assert np.array_equal(want[0].view(np.uint8), np.broadcast_to(exact(weight, fmt), (3, 64)))
            for stream in ("0", "1"):
                monkeypatch.setenv("ROPEGEN_STREAM", stream)
                assert _bits(op.run_all(*args, backend="c")) == _bits(want)
