"""The planned angles of a rope operator: cos/sin tables, or frequencies computed once here (exact
float64 constants, or ggml's float32 numerics), every constant correctly rounded (ropegen/exact.py).

Which scaling form changes the frequencies, and how, is its row in forms/scaling.py; this module
holds the plan records and the arithmetic every form shares.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Union

import numpy as np

from ropegen import exact, ir
from ropegen.ir.dtypes import DType


@dataclass(frozen=True)
class ExactAngles:
    """theta[c] = p * inv_freq[c] (/ freq_factors[c]) in float64; cos/sin scaled by magnitude.

    length_unit "call" or "sequence": the frequencies depend on the length (longrope,
    dynamic_ntk); the kernels read them from a float64 [units, columns] buffer the host fills per
    call (ops/rope/frequency_rows.py), one row per call or per packed sequence, and `inv_freq` is
    the row of lengths up to original_max_positions."""

    kind = "exact"   # the word backends and templates branch on
    inv_freq: tuple[float, ...]
    magnitude: float
    freq_factors: str | None
    length_unit: str | None = None

    def constants(self) -> list[float]:
        return [*self.inv_freq, self.magnitude, float(np.float32(self.magnitude))]


@dataclass(frozen=True)
class GgmlAngles:
    """ggml's float32 numerics: theta_0 = p, theta_{c+1} = theta_c * theta_scale (all float32),
    theta_e = theta / ff[c], theta_i = freq_scale * theta_e, theta = theta_i*one_minus_ramp[c]
    + theta_e*ramp[c] when yarn, cos/sin multiplied by mscale (float32)."""

    kind = "ggml"
    length_unit = None    # ggml numerics take no length-dependent scaling
    theta_scale: float
    freq_scale: float
    ramp: tuple[float, ...]
    one_minus_ramp: tuple[float, ...]
    yarn: bool
    mscale: float
    freq_factors: str | None
    corr_dims: tuple[float, float]

    def constants(self) -> list[float]:
        return [self.theta_scale, self.freq_scale, self.mscale, *self.ramp]


@dataclass(frozen=True)
class TableAnglesPlan:
    kind = "table"
    length_unit = None
    cos: str
    sin: str
    dtype: DType
    per_token: bool                # rows are tokens (no positions); else rows are positions
    width: int                     # columns of cos (and of sin)
    sin_column: int = 0            # sin's first column in its tensor (a fused cos_sin cache: width)

    @property
    def fused(self) -> bool:
        return self.cos == self.sin

    def constants(self) -> list[float]:
        return []


AnglesPlan = Union[ExactAngles, GgmlAngles, TableAnglesPlan]


# ---------------------------------------------------------------------------------------------
# shared frequency arithmetic

def base_inv_freq(base: float, dim: int, n: int) -> list[exact.Real]:
    """inv_c = base^(-2c/dim), c < n, at high precision (rounded by the caller, once)."""
    return [exact.power(base, -2 * c, dim) for c in range(n)]


def ggml_corr_dims(n_dims: int, n_ctx_orig: int, base: float, beta_fast: float,
                   beta_slow: float) -> tuple[float, float]:
    """ggml_rope_yarn_corr_dims in float32 as ggml writes it, with logf correctly rounded."""
    f32 = np.float32
    pi = f32(np.pi)

    def corr_dim(n_rot: float) -> np.float32:
        num = f32(n_dims) * exact.logf(f32(n_ctx_orig) / (f32(n_rot) * f32(2) * pi))
        return f32(num / (f32(2) * exact.logf(f32(base))))

    start = np.floor(corr_dim(beta_fast))
    end = np.ceil(corr_dim(beta_slow))
    return float(max(f32(0), start)), float(min(f32(n_dims - 1), end))


def ggml_theta_scale(base: float, n_dims: int) -> float:
    """powf(base, -2.0f/n_dims), correctly rounded (glibc's powf is; numpy's float32 power is not)."""
    return float(exact.powf(np.float32(base), np.float32(-2.0) / np.float32(n_dims)))


def ggml_ramp(low: float, high: float, n: int, ext_factor: float) -> np.ndarray:
    """rope_yarn_ramp(low, high, 2c) * ext_factor in float32, for c < n (ggml's i0/2 == c)."""
    f32 = np.float32
    c = np.arange(n).astype(f32)
    y = (c - f32(low)) / np.maximum(f32(0.001), f32(high) - f32(low))
    ramp = f32(1) - np.minimum(f32(1), np.maximum(f32(0), y))
    return (ramp * f32(ext_factor)).astype(f32)


def _ggml_mscale(attn: float, freq_scale: float, yarn: bool) -> float:
    f32 = np.float32
    m = f32(attn)
    if yarn:
        m = f32(m * (f32(1) + f32(0.1) * exact.logf(f32(1) / f32(freq_scale))))
    return float(m)


# ---------------------------------------------------------------------------------------------
# the two angle forms' plans (forms/angle.py names them in its rows)

def plan_table(op: ir.RopeOp, n_cols: int, per_token: bool) -> TableAnglesPlan:
    a = op.angles
    cos = op.tensor(a.cos)
    return TableAnglesPlan(a.cos, a.sin, cos.dtype, per_token, int(cos.axes[-1].size) - a.sin_column,
                           a.sin_column)


def plan_computed(op: ir.RopeOp, n_cols: int, numerics, scaling) -> ExactAngles | GgmlAngles:
    """`numerics` and `scaling` are the rows (forms.NumericsForm, forms.ScalingForm) of the operator."""
    # the frequencies of one rotated half (glm2d) or of the whole rotary extent
    dim = op.rotary_dim // 2 if op.pairing.kind is ir.PairKind.GLM2D else op.rotary_dim
    planned = numerics.plan(op.angles, n_cols, dim, scaling)
    if scaling.length_key is None:
        return planned
    from ropegen.ops.rope.forms.position import position_of     # forms import this module
    return replace(planned, length_unit=position_of(op.positions).length_unit)


def plan_ggml(a: ir.ComputedAngles, n_cols: int, dim: int, scaling) -> GgmlAngles:
    theta_scale = ggml_theta_scale(a.base, dim)
    fs, ext, attn, corr = scaling.ggml(a.scaling, dim, a.base)
    ramp = ggml_ramp(corr[0], corr[1], n_cols, ext)
    yarn = ext != 0.0
    mscale = float(np.float32(_ggml_mscale(attn, fs, yarn)) * np.float32(a.magnitude))
    return GgmlAngles(theta_scale, float(np.float32(fs)), tuple(float(x) for x in ramp),
                      tuple(float(np.float32(1) - x) for x in ramp), yarn, mscale, a.freq_factors, corr)


def plan_exact(a: ir.ComputedAngles, n_cols: int, dim: int, scaling) -> ExactAngles:
    inv, gain = scaling.frequencies(base_inv_freq(a.base, dim, n_cols), a.scaling, dim, a.base)
    magnitude = exact.real(a.magnitude) * gain
    return ExactAngles(tuple(exact.f64(f) for f in inv), exact.f64(magnitude), a.freq_factors)
