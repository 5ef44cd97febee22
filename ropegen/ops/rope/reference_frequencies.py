"""The frequency formulas of the float64 rope reference, one function per scaling form (its row's
`reference` and `ggml_reference` name them): inverse frequencies and magnitude from the scaling's own
definition (HF, vLLM, ggml), in float64 or in ggml's float32 where ggml computes so. Split from
reference.py, which holds the rest of the reference."""
from __future__ import annotations

import math

import numpy as np

from ropegen import ir


def unscaled(inv, m, s, d, base, n):
    return inv, m


def linear_scaled(inv, m, s: ir.LinearScaling, d, base, n):
    return inv / s.factor, m


def llama3_scaled(inv, m, s: ir.Llama3Scaling, d, base, n):
    # HF / vLLM form: smooth = (L/wavelen - lf)/(hf - lf), blended between inv/factor and inv
    wavelen = 2 * np.pi / inv
    low_wl = s.original_max_positions / s.low_freq_factor
    high_wl = s.original_max_positions / s.high_freq_factor
    scaled = np.where(wavelen > low_wl, inv / s.factor, inv)
    if s.high_freq_factor != s.low_freq_factor:
        smooth = (s.original_max_positions / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor)
    else:
        smooth = np.zeros_like(inv)
    mid = ~(wavelen < high_wl) & ~(wavelen > low_wl)
    return np.where(mid, (1 - smooth) * inv / s.factor + smooth * inv, scaled), m


def yarn_scaled(inv, m, s: ir.GgmlYarnScaling, d, base, n):
    low, high = _corr_dims(d, s, base)
    ramp = np.array([(1 - min(1.0, max(0.0, (i - low) / max(0.001, high - low)))) * s.ext_factor
                     for i in range(n)])
    # blending angles equals blending frequencies: theta is linear in p
    inv = inv * s.freq_scale * (1 - ramp) + inv * ramp
    if s.ext_factor != 0:
        m *= 1 + 0.1 * math.log(1 / s.freq_scale)
    m *= s.attn_factor
    return inv, m


def hf_yarn_scaled(inv, m, s: ir.YarnScaling, d, base, n):
    # transformers `_compute_yarn_parameters`: find_correction_range, linear_ramp_factor, the blend
    def corr(rot):
        return d * math.log(s.original_max_positions / (rot * 2 * math.pi)) / (2 * math.log(base))
    low, high = corr(s.beta_fast), corr(s.beta_slow)
    if s.truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, d - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(n) - low) / (high - low), 0, 1)
    extrapolation = 1 - ramp
    inv = (inv / s.factor) * (1 - extrapolation) + inv * extrapolation

    def get_mscale(scale, k=1.0):
        return 1.0 if scale <= 1 else 0.1 * k * math.log(scale) + 1.0
    if s.attention_factor is not None:
        gain = s.attention_factor
    elif s.mscale and s.mscale_all_dim:
        gain = get_mscale(s.factor, s.mscale) / get_mscale(s.factor, s.mscale_all_dim)
    else:
        gain = get_mscale(s.factor)
    return inv, m * gain


def ntk_scaled(inv, m, s: ir.NtkScaling, d, base, n):
    # NTK-aware: a new base, base * a^(d / (d - 2)), then the usual base^(-2i/d)
    if d <= 2:
        return inv, m
    new_base = base * s.a ** (d / (d - 2))
    return np.array([new_base ** (-(2.0 * i) / d) for i in range(n)]), m


def longrope_scaled(inv, m, s: ir.LongRopeScaling, d, base, n, length):
    # transformers `_compute_longrope_parameters`: long factors when seq_len > original_max_position_embeddings
    ext = np.array(s.long_factor if length > s.original_max_positions else s.short_factor, dtype=np.float64)
    inv = 1.0 / (ext * base ** (np.arange(0, d, 2)[:n] / d))
    if s.attention_factor is not None:
        gain = s.attention_factor
    elif s.factor is None or s.factor <= 1:
        gain = 1.0
    else:
        gain = math.sqrt(1 + math.log(s.factor) / math.log(s.original_max_positions))
    return inv, m * gain


def dynamic_ntk_scaled(inv, m, s: ir.DynamicNtkScaling, d, base, n, length):
    # transformers `_compute_dynamic_ntk_parameters`: seq_len = max(seq_len, max_position_embeddings)
    L = max(length, s.original_max_positions)
    new_base = base * ((s.factor * L / s.original_max_positions) - (s.factor - 1)) ** (d / (d - 2))
    return 1.0 / (new_base ** (np.arange(0, d, 2)[:n] / d)), m


def ggml_unscaled(s, d, base):
    """ggml's parameters (freq_scale, ext_factor, attn_factor, corr low, corr high) without scaling."""
    f32 = np.float32
    return f32(1), f32(0), f32(1), 0.0, 0.0


def ggml_yarn(s: ir.GgmlYarnScaling, d, base):
    f32 = np.float32
    return (f32(s.freq_scale), f32(s.ext_factor), f32(s.attn_factor)) + _corr_dims(d, s, base)


def _corr_dims(n_dims: int, s: ir.GgmlYarnScaling, base: float) -> tuple[float, float]:
    # ggml evaluates these in float32; the floor/ceil make the result an integer either way
    f32 = np.float32

    def corr(n_rot: float) -> float:
        return float(f32(f32(n_dims) * np.log(f32(s.n_ctx_orig) / (f32(n_rot) * f32(2) * f32(math.pi)), dtype=f32))
                     / (f32(2) * np.log(f32(base), dtype=f32)))

    return max(0.0, math.floor(corr(s.beta_fast))), min(n_dims - 1.0, math.ceil(corr(s.beta_slow)))
