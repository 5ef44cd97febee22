"""Planned constants are the correctly rounded values of their formulas, whatever the host's libm/SIMD.

The expected values are computed here with `decimal` and `fractions` (not mpmath, which the planner
uses), so a mistake in ropegen.exact cannot hide on both sides.
"""
from __future__ import annotations

import math
from decimal import Decimal, localcontext
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

import ropegen
from ropegen import ir
from ropegen.ops import plan

EXAMPLES = sorted((Path(__file__).resolve().parents[1] / "examples").glob("*.rope"))

# 110 digits of pi, for the Llama-3 wavelength bands
PI = Decimal("3.14159265358979323846264338327950288419716939937510582097494459230781640628620899862803482534211706798214808651")


def _nearest(value: Decimal, np_type) -> float:
    """The float32/float64 nearest to `value` (ties to even), decided with exact fractions."""
    x = Fraction(value)
    guess = np_type(float(value))
    cands = [guess, np.nextafter(guess, np_type(-np.inf)), np.nextafter(guess, np_type(np.inf))]
    bits = np.uint32 if np_type is np.float32 else np.uint64
    return float(min(cands, key=lambda c: (abs(Fraction(float(c)) - x),
                                            int(np.array(c, dtype=np_type).view(bits)) & 1)))


def _pow(base: float, num: int, den: int) -> Decimal:
    with localcontext() as ctx:
        ctx.prec = 90
        return Decimal(base) ** (Decimal(num) / Decimal(den))


def _spec(body: str, head_dim: int = 128) -> ir.RopeOp:
    text = f"""rope r {{
        in q: f32[tokens=T, heads=2, head_dim={head_dim}]
        in p: i64[T]
        out y = rotate(q)
        pairing = neox
        positions = p
        {body}
    }}"""
    return ropegen.compile(text)["r"].plan


@pytest.mark.parametrize("base", [10000.0, 500000.0, 1e6, 10000.5, 2.0, 3.7, 1234567.0, 75000.0])
@pytest.mark.parametrize("dim", [4, 6, 32, 64, 80, 96, 128, 256])
def test_inverse_frequencies_are_correctly_rounded(base, dim):
    p = _spec(f"angles = computed(base = {base!r})", head_dim=dim)
    want = [_nearest(_pow(base, -2 * c, dim), np.float64) for c in range(dim // 2)]
    assert list(p.angles.inv_freq) == want


def test_llama3_bands_are_rounded_once():
    p = _spec("angles = computed(base = 500000, scaling = llama3(factor = 8, low_freq_factor = 1, "
              "high_freq_factor = 4, original_max_positions = 8192))")
    want = []
    with localcontext() as ctx:
        ctx.prec = 90
        lo_wl, hi_wl = Decimal(8192) / 1, Decimal(8192) / 4
        for c in range(64):
            f = _pow(500000.0, -2 * c, 128)
            w = 2 * PI / f
            if w < hi_wl:
                v = f
            elif w > lo_wl:
                v = f / 8
            else:
                smooth = (Decimal(8192) / w - 1) / (4 - 1)
                v = (1 - smooth) * f / 8 + smooth * f
            want.append(_nearest(v, np.float64))
    assert list(p.angles.inv_freq) == want
    # the value a host's np.power got wrong on AVX-512 (committed before the fix): 500000^(-14/128)
    assert p.angles.inv_freq[7] == _nearest(_pow(500000.0, -14, 128), np.float64)


def test_linear_scaling_is_rounded_once():
    p = _spec("angles = computed(base = 10000, scaling = linear(factor = 3))", head_dim=64)
    with localcontext() as ctx:
        ctx.prec = 90
        want = [_nearest(_pow(10000.0, -2 * c, 64) / 3, np.float64) for c in range(32)]
    assert list(p.angles.inv_freq) == want


@pytest.mark.parametrize("base", [10000.0, 500000.0, 1e6, 3.5, 123456.789])
@pytest.mark.parametrize("n_dims", [2, 6, 10, 32, 64, 80, 96, 100, 128, 130])
def test_ggml_theta_scale_is_powf_correctly_rounded(base, n_dims):
    b32 = float(np.float32(base))
    e32 = Fraction(float(np.float32(-2.0) / np.float32(n_dims)))
    with localcontext() as ctx:
        ctx.prec = 90
        exact = Decimal(b32) ** (Decimal(e32.numerator) / Decimal(e32.denominator))
    assert plan.ggml_theta_scale(base, n_dims) == _nearest(exact, np.float32)


def test_ggml_corr_dims_and_mscale_use_correctly_rounded_logf():
    def logf(x: float) -> np.float32:
        with localcontext() as ctx:
            ctx.prec = 60
            return np.float32(_nearest(Decimal(float(np.float32(x))).ln(), np.float32))

    f32 = np.float32
    for n_dims, n_ctx, base in [(128, 4096, 10000.0), (64, 2048, 1e6), (80, 32768, 500000.0)]:
        def corr(n_rot):
            num = f32(n_dims) * logf(f32(n_ctx) / (f32(n_rot) * f32(2) * f32(np.pi)))
            return f32(num / (f32(2) * logf(f32(base))))
        want = (float(max(f32(0), np.floor(corr(32.0)))), float(min(f32(n_dims - 1), np.ceil(corr(1.0)))))
        assert plan.ggml_corr_dims(n_dims, n_ctx, base, 32.0, 1.0) == want
    for fs in (0.25, 0.125, 0.3, 1 / 40):
        want = float(f32(f32(1) * (f32(1) + f32(0.1) * logf(f32(1) / f32(fs)))))
        assert plan._ggml_mscale(1.0, fs, True) == want


def _all_plans():
    return [op.plan for spec in EXAMPLES for op in ropegen.compile(spec)]


def _constants(plans) -> list:
    out = []
    for p in plans:
        a = getattr(p, "angles", None)
        if isinstance(a, plan.ExactAngles):
            out.append((p.name, a.inv_freq, a.magnitude))
        elif isinstance(a, plan.GgmlAngles):
            out.append((p.name, a.theta_scale, a.mscale, a.ramp, a.corr_dims))
        else:
            out.append((p.name, repr(a)))
    return out


def test_plan_does_not_depend_on_host_libm_or_numpy_simd(monkeypatch):
    """Make every host transcendental one ulp off: no planned constant may move."""
    before = _constants(_all_plans())

    def off_by_one_ulp(fn):
        def wrapped(*args, **kwargs):
            r = fn(*args, **kwargs)
            return np.nextafter(r, np.asarray(r).dtype.type(np.inf)) if np.asarray(r).dtype.kind == "f" else r
        return wrapped

    for name in ("power", "log", "exp", "exp2", "log2", "float_power", "sqrt"):
        monkeypatch.setattr(np, name, off_by_one_ulp(getattr(np, name)))
    for name in ("pow", "log", "exp", "log2", "sqrt"):
        fn = getattr(math, name)
        monkeypatch.setattr(math, name, lambda *a, _fn=fn: math.nextafter(_fn(*a), math.inf))
    after = _constants(_all_plans())
    assert after == before
