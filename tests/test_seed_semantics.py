"""Seed semantics: independent transcriptions of the seed documents, compared with every backend.

Each reference below is written from the seed text (../shared/reference/atb-rope.md,
../shared/seeds/ggml-rope-notes.txt, ../shared/seeds/ppl-Rotary2DPositionEmbedding.md,
../shared/reference/rope-landscape.md sections 2.7, 2.8, 3 and 6), not from ropegen's plan,
templates or reference evaluator: pair maps, positions, frequencies and rounding are re-derived here.
The example operators in examples/*.rope are compiled and run on every backend that can run on this
machine (`ropegen.backends.BACKENDS`, `.unavailable()` is None); the others are skipped with the reason.

- ATB: the golden function (per-element cos/sin tables of width W, rotaryCoeff blocks), evaluated with
  every product and sum rounded to the compute type (fp16 / bf16 = storage, fp32 for fp32 tables).
  Each rounding is done explicitly from an exact float64 value; float64 holds every fp16/bf16 product
  and sum exactly (or with a first rounding innocuous for double rounding), so this is IEEE arithmetic
  in the small type. ropegen must match it bit for bit.
- ggml: ggml_rope_yarn_corr_dims, rope_yarn_ramp, rope_yarn, ggml_rope_cache_init (float32 running
  product theta *= theta_scale, theta / freq_factors, sin_sign = -1 backward) and the normal / NeoX
  pair loops, all in float32 step by step. powf/logf/cosf/sinf are modelled as correctly rounded
  float32 functions (float64 evaluation rounded once), which is what glibc's float32 libm returns.
- PPL: the seed's python loop for Rotary2DPositionEmbedding, with f = 1-D RoPE, adjacent pairs, on a
  half of D/2 lanes with inv_freq = theta^(-2j/(D/2)); the 1-D RotaryPositionEmbedding with position
  start_pos + s - pad_len[b]; bypass_key.
- Llama-3: Hugging Face's Llama-3.1 inv_freq scaling (wavelength thresholds, smooth factor) in float64
  and rotate_half.
"""
from __future__ import annotations

import math
from functools import lru_cache
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import ropegen
from ropegen import backends, ir
from ropegen.ops.plan import ExactAngles, ggml_corr_dims

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
F16 = np.dtype(np.float16)
BF16 = np.dtype(ml_dtypes.bfloat16)
F32 = np.dtype(np.float32)
f32 = np.float32


@lru_cache(maxsize=None)
def program(name: str) -> ropegen.Program:
    return ropegen.compile(EXAMPLES / name)


def operator(file: str, name: str) -> ropegen.Operator:
    return program(file)[name]


@pytest.fixture(params=[b.name for b in backends.BACKENDS])
def backend(request) -> str:
    why = backends.get(request.param).unavailable()
    if why:
        pytest.skip(f"backend '{request.param}' is unavailable: {why}")
    return request.param


# ---------------------------------------------------------------------------------------------
# comparison helpers

def _ordered_bits(a: np.ndarray) -> np.ndarray:
    """Map a float16 / bfloat16 array to integers whose difference counts ulps (-0 == +0)."""
    bits = np.ascontiguousarray(a).view(np.uint16).astype(np.int64)
    return np.where(bits & 0x8000, -(bits & 0x7FFF), bits)


def ulp_distance(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    assert got.dtype == want.dtype and got.dtype in (F16, BF16), (got.dtype, want.dtype)
    return np.abs(_ordered_bits(got) - _ordered_bits(want))


def assert_bit_exact(got: np.ndarray, want: np.ndarray, what: str) -> None:
    """Equal values (NaN-free inputs; -0 and +0 counted equal), reporting the worst element."""
    assert got.shape == want.shape and got.dtype == want.dtype, (what, got.shape, got.dtype, want.shape, want.dtype)
    if got.dtype in (F16, BF16):
        d = ulp_distance(got, want)
        if d.max() == 0:
            return
        i = np.unravel_index(int(np.argmax(d)), d.shape)
        raise AssertionError(f"{what}: {int((d > 0).sum())} of {d.size} elements differ, worst {int(d.max())} ulp "
                             f"at {i}: got {float(got[i])!r}, golden {float(want[i])!r}")
    diff = got.astype(np.float64) != want.astype(np.float64)
    if diff.any():
        i = tuple(np.argwhere(diff)[0])
        raise AssertionError(f"{what}: {int(diff.sum())} elements differ; first at {i}: "
                             f"got {float(got[i])!r}, golden {float(want[i])!r}")


def storage_ulp(exact: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """The spacing of `dtype` at |exact| (normal range), float64."""
    mant = {F16: 10, BF16: 7, F32: 23}[np.dtype(dtype)]
    tiny = {F16: 2.0 ** -14, BF16: 2.0 ** -126, F32: 2.0 ** -126}[np.dtype(dtype)]
    e = np.floor(np.log2(np.maximum(np.abs(exact), tiny)))
    return np.exp2(e - mant)


def assert_within_storage_ulp(got: np.ndarray, exact: np.ndarray, atol: float, what: str) -> None:
    """|got - exact| <= 1 ulp of the storage type at the exact value, plus `atol` for cancellations."""
    g = got.astype(np.float64)
    err = np.abs(g - exact)
    bound = storage_ulp(exact, got.dtype) + atol
    bad = err > bound
    if bad.any():
        i = tuple(np.argwhere(bad)[0])
        raise AssertionError(f"{what}: {int(bad.sum())} of {err.size} elements off by more than 1 ulp; "
                             f"first at {i}: got {g[i]!r}, exact {exact[i]!r}, bound {bound[i]!r}")


# =============================================================================================
# ATB RopeOperation: the golden function
# =============================================================================================

def atb_golden(x: np.ndarray, cos_rows: np.ndarray, sin_rows: np.ndarray, coeff: int,
               arith: np.dtype) -> np.ndarray:
    """x [ntokens, hidden] (fp16/bf16), cos/sin [ntokens, W] one row per token.

    headNum = hidden / W; t = W / coeff; head h, block k < coeff/2, j < t: a = 2tk + j, b = a + t,
        out[a] = x[a]*cos[a] - x[b]*sin[a]
        out[b] = x[b]*cos[b] + x[a]*sin[b]
    with every product and the sum rounded to `arith`; the result is cast to x's dtype.
    """
    n, hidden = x.shape
    W = cos_rows.shape[1]
    assert hidden % W == 0 and W % coeff == 0
    t = W // coeff

    def rnd(v: np.ndarray) -> np.ndarray:      # one IEEE rounding to the arithmetic type
        return v.astype(arith).astype(np.float64)

    X = x.astype(arith).astype(np.float64).reshape(n, hidden // W, W)
    C = cos_rows.astype(arith).astype(np.float64)[:, None, :]
    S = sin_rows.astype(arith).astype(np.float64)[:, None, :]
    out = np.full(X.shape, np.nan)
    for k in range(coeff // 2):
        for j in range(t):
            a = 2 * t * k + j
            b = a + t
            out[..., a] = rnd(rnd(X[..., a] * C[..., a]) - rnd(X[..., b] * S[..., a]))
            out[..., b] = rnd(rnd(X[..., b] * C[..., b]) + rnd(X[..., a] * S[..., b]))
    assert not np.isnan(out).any()
    return out.reshape(n, hidden).astype(arith).astype(x.dtype)


# name -> (q heads, k heads, head_dim, table width W, rotaryCoeff, x dtype, table dtype, arithmetic, cosFormat)
ATB_CASES = {
    "atb_coeff4_fp16": (4, 2, 64, 64, 4, F16, F16, F16, 0),
    "atb_coeff2_bf16": (4, 1, 64, 64, 2, BF16, BF16, BF16, 0),
    "atb_coeffW_high_precision": (4, 4, 32, 32, 32, F16, F32, F32, 0),
    "atb_coeff_half_table": (2, 2, 64, 32, 16, F16, F16, F16, 0),
    "atb_cos_format1": (4, 2, 64, 64, 2, F16, F16, F16, 1),
}


def _atb_values(rng: np.random.Generator, shape, dtype) -> np.ndarray:
    """Activations over a wide dynamic range (subnormal products included), some exact zeros."""
    v = rng.standard_normal(shape) * 10.0 ** rng.uniform(-5, 2.5, shape)
    v[rng.random(shape) < 0.02] = 0.0
    return v.astype(dtype)


def _atb_table(rng: np.random.Generator, shape, dtype) -> np.ndarray:
    """Random tables, as in the golden test: no cos[a] = cos[b] structure, so per-element reads matter."""
    v = rng.uniform(-1, 1, shape)
    v[rng.random(shape) < 0.02] = 0.0
    return v.astype(dtype)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("name", sorted(ATB_CASES))
def test_atb_matches_golden(backend, name, seed):
    hq, hk, D, W, coeff, xdt, tdt, arith, cos_format = ATB_CASES[name]
    op = operator("atb_rope.rope", name)
    # the example still says what this test assumes
    assert op.ir.pairing.kind is ir.PairKind.BLOCK and op.ir.pairing.coeff == coeff
    assert op.ir.rotated[0].dtype.np_dtype == xdt and op.ir.tensor("cos").dtype.np_dtype == tdt
    assert (op.ir.compute is ir.Compute.STORAGE) == (arith == xdt)
    assert (op.ir.positions.kind is ir.PositionKind.IN_SEQUENCE) == (cos_format == 1)

    rng = np.random.default_rng(1000 + seed)
    seqlen = np.array([5, 1, 7, 3, 9][: 3 + seed], dtype=np.int32)
    T = int(seqlen.sum())
    q = _atb_values(rng, (T, hq * D), xdt)
    k = _atb_values(rng, (T, hk * D), xdt)
    if cos_format == 0:
        rows = T
    else:
        rows = int(seqlen.max()) + 3          # maxSeq rows; sequence b reads rows 0..seqlen[b]-1
    cos = _atb_table(rng, (rows, W), tdt)
    sin = _atb_table(rng, (rows, W), tdt)
    if cos_format == 0:
        cos_rows, sin_rows = cos, sin
    else:
        idx = np.concatenate([np.arange(n) for n in seqlen])
        cos_rows, sin_rows = cos[idx], sin[idx]

    got_q, got_k = op.run(q, k, cos, sin, seqlen, backend=backend)
    assert_bit_exact(got_q, atb_golden(q, cos_rows, sin_rows, coeff, arith), f"{name} ropeQ")
    assert_bit_exact(got_k, atb_golden(k, cos_rows, sin_rows, coeff, arith), f"{name} ropeK")


def test_atb_golden_is_a_rotation_for_structured_tables():
    """Sanity of the transcription itself: coeff 2 with a cat(f, f) table is NeoX rotate_half."""
    rng = np.random.default_rng(5)
    T, W = 4, 8
    x = rng.standard_normal((T, W))
    ang = rng.uniform(-3, 3, (T, W // 2))
    cos = np.concatenate([np.cos(ang)] * 2, axis=1)
    sin = np.concatenate([np.sin(ang)] * 2, axis=1)
    got = atb_golden(x, cos, sin, 2, np.dtype(np.float64)).astype(np.float64)
    x64 = x.astype(np.float64)
    half = np.concatenate([-x64[:, W // 2:], x64[:, :W // 2]], axis=1)
    np.testing.assert_allclose(got, x64 * cos + half * sin, rtol=1e-12, atol=1e-12)


# =============================================================================================
# ggml_rope_ext: a float32 transcription of the seed's C
# =============================================================================================

def logf(v) -> np.float32:
    v = float(f32(v))
    return f32(-np.inf) if v == 0 else f32(math.log(v))


def powf(base, e) -> np.float32:
    return f32(float(f32(base)) ** float(f32(e)))


def ggml_rope_yarn_corr_dim(n_dims: int, n_ctx_orig: int, n_rot: float, base: float) -> np.float32:
    # return n_dims * logf(n_ctx_orig / (n_rot * 2 * (float)M_PI)) / (2 * logf(base));
    return f32(f32(n_dims) * logf(f32(n_ctx_orig) / (f32(f32(n_rot) * f32(2)) * f32(math.pi)))) / \
        f32(f32(2) * logf(base))


def ggml_rope_yarn_corr_dims(n_dims, n_ctx_orig, freq_base, beta_fast, beta_slow) -> tuple[float, float]:
    start = np.floor(ggml_rope_yarn_corr_dim(n_dims, n_ctx_orig, beta_fast, freq_base))
    end = np.ceil(ggml_rope_yarn_corr_dim(n_dims, n_ctx_orig, beta_slow, freq_base))
    return float(max(f32(0), start)), float(min(f32(n_dims - 1), end))


def rope_yarn_ramp(low: float, high: float, i0: int) -> np.float32:
    # const float y = (i0 / 2 - low) / MAX(0.001f, high - low); return 1 - MIN(1, MAX(0, y));
    y = f32(f32(i0 // 2) - f32(low)) / max(f32(0.001), f32(f32(high) - f32(low)))
    return f32(f32(1) - min(f32(1), max(f32(0), f32(y))))


def rope_yarn(theta_extrap: np.ndarray, freq_scale, corr_dims, i0: int, ext_factor, mscale):
    """Vectorised over tokens; every operation in float32 as in the C."""
    freq_scale, ext_factor, mscale = f32(freq_scale), f32(ext_factor), f32(mscale)
    theta_interp = (freq_scale * theta_extrap).astype(f32)
    theta = theta_interp
    if ext_factor != f32(0):
        ramp_mix = f32(rope_yarn_ramp(corr_dims[0], corr_dims[1], i0) * ext_factor)
        theta = ((theta_interp * f32(f32(1) - ramp_mix)).astype(f32) + (theta_extrap * ramp_mix).astype(f32)).astype(f32)
        mscale = f32(mscale * f32(f32(1) + f32(f32(0.1) * logf(f32(1) / freq_scale))))
    cosf = np.cos(theta.astype(np.float64)).astype(f32)     # correctly rounded cosf / sinf
    sinf = np.sin(theta.astype(np.float64)).astype(f32)
    return (cosf * mscale).astype(f32), (sinf * mscale).astype(f32)


def ggml_rope_cache_init(theta_base: np.ndarray, freq_scale, freq_factors, corr_dims, ne0: int, ext_factor,
                         mscale, sin_sign: float, theta_scale) -> np.ndarray:
    """cache[token, i0] (cos at even i0, sin at odd), from theta = p, theta *= theta_scale per pair."""
    cache = np.empty(theta_base.shape + (ne0,), dtype=f32)
    theta = theta_base.astype(f32)
    for i0 in range(0, ne0, 2):
        ff = f32(freq_factors[i0 // 2]) if freq_factors is not None else f32(1)
        c, s = rope_yarn((theta / ff).astype(f32), freq_scale, corr_dims, i0, ext_factor, mscale)
        cache[:, i0] = c
        cache[:, i0 + 1] = (s * f32(sin_sign)).astype(f32)
        theta = (theta * f32(theta_scale)).astype(f32)
    return cache


def ggml_rope(x: np.ndarray, pos: np.ndarray, *, n_dims: int, neox: bool, freq_base: float,
              freq_scale: float = 1.0, ext_factor: float = 0.0, attn_factor: float = 1.0,
              beta_fast: float = 32.0, beta_slow: float = 1.0, n_ctx_orig: int = 0,
              freq_factors: np.ndarray | None = None, backward: bool = False) -> np.ndarray:
    """ggml_compute_forward_rope_f32 on x [tokens, heads, head_dim] (ggml ne = {head_dim, heads, tokens})."""
    T, H, ne0 = x.shape
    theta_scale = powf(freq_base, f32(-2.0) / f32(n_dims))
    corr_dims = ggml_rope_yarn_corr_dims(n_dims, n_ctx_orig, freq_base, beta_fast, beta_slow)
    sin_sign = -1.0 if backward else 1.0
    cache = ggml_rope_cache_init(pos.astype(f32), freq_scale, freq_factors, corr_dims, ne0, ext_factor,
                                 attn_factor, sin_sign, theta_scale)
    src = x.astype(f32)
    dst = src.copy()                     # lanes i0 >= n_dims are copied
    for i0 in range(0, n_dims, 2):
        cos_theta = cache[:, None, i0]
        sin_theta = cache[:, None, i0 + 1]
        if not neox:
            a, b = i0, i0 + 1
        else:
            a, b = i0 // 2, i0 // 2 + n_dims // 2
        x0, x1 = src[..., a], src[..., b]
        dst[..., a] = ((x0 * cos_theta).astype(f32) - (x1 * sin_theta).astype(f32)).astype(f32)
        dst[..., b] = ((x0 * sin_theta).astype(f32) + (x1 * cos_theta).astype(f32)).astype(f32)
    return dst


def test_corr_dims_worked_example():
    """The seed's example: n_dims 128, n_ctx_orig 4096, base 10000, beta_fast 32, beta_slow 1 -> {20, 46}."""
    assert ggml_rope_yarn_corr_dims(128, 4096, 10000.0, 32.0, 1.0) == (20.0, 46.0)
    assert ggml_corr_dims(128, 4096, 10000.0, 32.0, 1.0) == (20.0, 46.0)
    # unrounded: 20.9445 with M_PI (the seed's gdb session printed 20.948 evaluating with pi = 3.14)
    assert 20.94 < float(ggml_rope_yarn_corr_dim(128, 4096, 32.0, 10000.0)) < 20.95
    assert 45 < float(ggml_rope_yarn_corr_dim(128, 4096, 1.0, 10000.0)) <= 46


@pytest.mark.parametrize("n_dims", [32, 64, 80, 128])
@pytest.mark.parametrize("n_ctx_orig", [2048, 4096, 32768])
@pytest.mark.parametrize("base", [10000.0, 500000.0, 1e6])
@pytest.mark.parametrize("betas", [(32.0, 1.0), (16.0, 2.0)])
def test_corr_dims_match_seed(n_dims, n_ctx_orig, base, betas):
    assert ggml_corr_dims(n_dims, n_ctx_orig, base, *betas) == \
        ggml_rope_yarn_corr_dims(n_dims, n_ctx_orig, base, *betas)


THETA_SCALE_BUG = (
    "ropegen computes ggml's theta_scale = powf(base, -2/n_dims) with numpy's float32 power "
    "(plan._angles: np.power(f32(base), f32(-2)/f32(dim), dtype=f32)), which is not correctly rounded: "
    "for base 10000 / n_dims 64 it returns 0.74989426 where powf (glibc, and the correctly rounded "
    "value) gives 0.7498942; the one-ulp error is then multiplied up by the running product, so angles "
    "at p ~ 4096 are off by ~1e-4 rad, far beyond float32 rounding (also base 500000 / n_dims 64)")

# name -> (head_dim, n_dims, neox, freq_base, yarn params or None, freq_factors?, backward, storage)
GGML_CASES = {
    "ggml_normal": (64, 64, False, 10000.0, None, False, False, F32),
    "ggml_neox_partial": (64, 32, True, 10000.0, None, False, False, F32),
    "ggml_neox_yarn": (128, 128, True, 10000.0, dict(freq_scale=0.25, ext_factor=1.0, attn_factor=1.0,
                                                     beta_fast=32.0, beta_slow=1.0, n_ctx_orig=4096),
                       False, False, F32),
    "ggml_freq_factors": (64, 64, True, 500000.0, None, True, False, F16),
    "ggml_backward": (64, 64, True, 10000.0, dict(freq_scale=0.5, ext_factor=1.0, attn_factor=1.0,
                                                  beta_fast=32.0, beta_slow=1.0, n_ctx_orig=2048),
                      False, True, F32),
}
GGML_XFAIL: set[str] = set()   # theta_scale bug fixed: plan.ggml_theta_scale rounds like powf


def _ggml_params():
    for name in sorted(GGML_CASES):
        marks = [pytest.mark.xfail(strict=True, reason=THETA_SCALE_BUG)] if name in GGML_XFAIL else []
        yield pytest.param(name, marks=marks, id=name)


def _ggml_inputs(rng, name):
    D, n_dims, neox, base, yarn, has_ff, backward, storage = GGML_CASES[name]
    op = operator("ggml_rope.rope", name)
    heads = op.ir.rotated[0].role_dim(ir.Role.HEADS).size
    T = 48
    x = rng.uniform(-1, 1, (T, heads, D)).astype(storage)
    pos = rng.integers(0, 4096, T).astype(np.int32)
    pos[:4] = [0, 1, 4095, 4096 - 17]
    ff = rng.uniform(1.0, 8.0, n_dims // 2).astype(np.float32) if has_ff else None
    if ff is not None:
        ff[:4] = 1.0
    return op, x, pos, ff


@pytest.mark.parametrize("name", list(_ggml_params()))
def test_ggml_numerics_match_seed(backend, name):
    D, n_dims, neox, base, yarn, has_ff, backward, storage = GGML_CASES[name]
    rng = np.random.default_rng(7)
    op, x, pos, ff = _ggml_inputs(rng, name)
    assert op.ir.numerics is ir.AngleNumerics.GGML and op.ir.rotary_dim == n_dims
    assert (op.ir.pairing.kind is ir.PairKind.NEOX) == neox
    assert (op.ir.direction is ir.Direction.BACKWARD) == backward
    want = ggml_rope(x, pos, n_dims=n_dims, neox=neox, freq_base=base, freq_factors=ff, backward=backward,
                     **(yarn or {}))
    args = (x, pos) + ((ff,) if ff is not None else ())
    got = op.run(*args, backend=backend)
    assert got.dtype == storage and got.shape == x.shape
    if storage == F16:
        # ggml converts f16 to f32, computes in f32 and stores f16: one rounding of the f32 result
        d = ulp_distance(got, want.astype(F16))
        assert d.max() <= 1, f"{name}: up to {int(d.max())} fp16 ulps from the float32 transcription"
    else:
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=name)
    # pass-through lanes are copied bit-exactly
    if n_dims < D:
        assert np.array_equal(got[..., n_dims:], x[..., n_dims:])


@pytest.mark.parametrize("name", list(_ggml_params()))
def test_ggml_theta_scale_is_powf(name):
    """The planned theta_scale is the correctly rounded float32 powf(base, -2/n_dims) (what glibc returns)."""
    D, n_dims, neox, base, *_ = GGML_CASES[name]
    planned = operator("ggml_rope.rope", name).plan.angles.theta_scale
    assert planned == float(powf(base, f32(-2.0) / f32(n_dims)))


def yarn_exact_f64(x: np.ndarray, pos: np.ndarray, *, n_dims: int, base: float, freq_scale: float,
                   ext_factor: float, attn_factor: float, beta_fast: float, beta_slow: float,
                   n_ctx_orig: int) -> np.ndarray:
    """ggml's YaRN formula (landscape 2.7) with the angle and the rotation in float64, NeoX pairs."""
    low, high = ggml_rope_yarn_corr_dims(n_dims, n_ctx_orig, base, beta_fast, beta_slow)
    i = np.arange(n_dims // 2, dtype=np.float64)
    theta_extrap = pos.astype(np.float64)[:, None] * base ** (-2.0 * i / n_dims)
    theta_interp = freq_scale * theta_extrap
    ramp = (1 - np.clip((i - low) / max(0.001, high - low), 0, 1)) * ext_factor
    theta = theta_interp * (1 - ramp) + theta_extrap * ramp
    mscale = attn_factor * ((1 + 0.1 * math.log(1 / freq_scale)) if ext_factor != 0 else 1.0)
    cos = (np.cos(theta) * mscale)[:, None, :]
    sin = (np.sin(theta) * mscale)[:, None, :]
    x = x.astype(np.float64)
    h = n_dims // 2
    out = x.copy()
    out[..., :h] = x[..., :h] * cos - x[..., h:n_dims] * sin
    out[..., h:n_dims] = x[..., h:n_dims] * cos + x[..., :h] * sin
    return out


def test_ggml_yarn_exact_matches_float64(backend):
    op = operator("ggml_rope.rope", "ggml_neox_yarn_exact")
    assert op.ir.numerics is ir.AngleNumerics.EXACT
    rng = np.random.default_rng(11)
    T = 64
    x = rng.uniform(-1, 1, (T, 8, 128)).astype(np.float32)
    pos = rng.integers(0, 16384, T).astype(np.int32)
    pos[:3] = [0, 4095, 16383]
    want = yarn_exact_f64(x, pos, n_dims=128, base=10000.0, freq_scale=0.25, ext_factor=1.0, attn_factor=1.0,
                          beta_fast=32.0, beta_slow=1.0, n_ctx_orig=4096)
    got = op.run(x, pos, backend=backend)
    # float32 cos/sin and float32 products: a few float32 ulps of the O(1) result
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-6)


def test_ggml_mode_and_exact_mode_agree_for_small_positions(backend):
    """Same YaRN settings, both numerics: they differ only by float32 angle rounding."""
    rng = np.random.default_rng(12)
    x = rng.uniform(-1, 1, (32, 8, 128)).astype(np.float32)
    pos = rng.integers(0, 64, 32).astype(np.int32)
    a = operator("ggml_rope.rope", "ggml_neox_yarn").run(x, pos, backend=backend)
    b = operator("ggml_rope.rope", "ggml_neox_yarn_exact").run(x, pos, backend=backend)
    np.testing.assert_allclose(a, b, rtol=0, atol=5e-5)


# =============================================================================================
# OpenPPL RotaryPositionEmbedding / Rotary2DPositionEmbedding
# =============================================================================================

def ppl_f(x: np.ndarray, pos: int, theta: float) -> np.ndarray:
    """1-D RoPE with adjacent pairs over the last dim d of x, inv_freq_j = theta^(-2j/d), float64."""
    d = x.shape[-1]
    j = np.arange(d // 2, dtype=np.float64)
    ang = pos * theta ** (-2.0 * j / d)
    c, s = np.cos(ang), np.sin(ang)
    x = x.astype(np.float64)
    out = np.empty_like(x)
    out[..., 0::2] = x[..., 0::2] * c - x[..., 1::2] * s
    out[..., 1::2] = x[..., 1::2] * c + x[..., 0::2] * s
    return out


def ppl_rotary_2d_seed(query: np.ndarray, start_pos: int, pad_len: np.ndarray, first_seqlen: int,
                       theta: float = 10000.0) -> np.ndarray:
    """The seed's python loop, literally (vectorised over heads only)."""
    batch, seqlen, num_heads, _ = query.shape
    rotated_query = np.empty(query.shape, dtype=np.float64)
    for b in range(batch):
        for s in range(seqlen):
            pivot = query.shape[-1] // 2
            offset = start_pos + s
            prompt_len = first_seqlen - pad_len[b]
            if offset < pad_len[b]:
                pos0 = 0
                pos1 = 0
            elif offset < first_seqlen - 1:
                pos0 = offset - pad_len[b]
                pos1 = 0
            else:
                pos0 = prompt_len - 2
                pos1 = offset - prompt_len + 2
            rotated_query[b, s, :, :pivot] = ppl_f(query[b, s, :, :pivot], pos0, theta)
            rotated_query[b, s, :, pivot:] = ppl_f(query[b, s, :, pivot:], pos1, theta)
    return rotated_query


def ppl_rotary_seed(x: np.ndarray, start_pos: int, pad_len: np.ndarray | None, rotary_dim: int,
                    theta: float = 10000.0) -> np.ndarray:
    """RotaryPositionEmbedding: position start_pos + s - pad_len[b]; the first rotary_dim lanes rotate."""
    B, S = x.shape[:2]
    out = x.astype(np.float64)
    for b in range(B):
        for s in range(S):
            p = start_pos + s - (0 if pad_len is None else int(pad_len[b]))
            out[b, s, :, :rotary_dim] = ppl_f(x[b, s, :, :rotary_dim], p, theta)
    return out


PPL_2D_CASES = {
    # (batch, seq, start_pos, pad_len, first_seqlen)
    "prefill": (3, 9, 0, [0, 2, 5], 9),
    "prefill_no_pad": (2, 6, 0, [0, 0], 6),
    "decode": (3, 1, 9, [0, 2, 5], 9),
    "decode_later": (3, 1, 40, [1, 0, 7], 9),
}


@pytest.mark.parametrize("case", sorted(PPL_2D_CASES))
def test_ppl_rotary_2d_matches_seed(backend, case):
    B, S, start_pos, pad, first = PPL_2D_CASES[case]
    op = operator("ppl_rope.rope", "ppl_rotary_2d")
    rng = np.random.default_rng(21)
    query = rng.uniform(-1, 1, (B, S, 4, 64)).astype(np.float32)
    key = rng.uniform(-1, 1, (B, S, 4, 64)).astype(np.float32)
    pad_len = np.array(pad, dtype=np.int64)
    got_q, got_k = op.run(query, key, np.int64(start_pos), pad_len, np.int64(first), backend=backend)
    np.testing.assert_allclose(got_q, ppl_rotary_2d_seed(query, start_pos, pad_len, first), rtol=2e-6, atol=2e-6)
    np.testing.assert_allclose(got_k, ppl_rotary_2d_seed(key, start_pos, pad_len, first), rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("start_pos", [0, 3, 100])
def test_ppl_rotary_matches_seed(backend, start_pos):
    op = operator("ppl_rope.rope", "ppl_rotary")
    rng = np.random.default_rng(22)
    B, S = 3, 7
    query = rng.uniform(-1, 1, (B, S, 8, 64)).astype(np.float32)
    key = rng.uniform(-1, 1, (B, S, 2, 64)).astype(np.float32)
    pad_len = np.array([0, 2, 4], dtype=np.int64)
    got_q, got_k = op.run(query, key, np.int64(start_pos), pad_len, backend=backend)
    np.testing.assert_allclose(got_q, ppl_rotary_seed(query, start_pos, pad_len, 64), rtol=2e-6, atol=2e-6)
    np.testing.assert_allclose(got_k, ppl_rotary_seed(key, start_pos, pad_len, 64), rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("start_pos", [0, 17])
def test_ppl_rotary_bypass_key_matches_seed(backend, start_pos):
    op = operator("ppl_rope.rope", "ppl_rotary_bypass_key")
    rng = np.random.default_rng(23)
    B, S = 2, 5
    query = rng.uniform(-2, 2, (B, S, 8, 64)).astype(np.float16)
    key = rng.uniform(-2, 2, (B, S, 8, 64)).astype(np.float16)
    got_q, got_k = op.run(query, key, np.int64(start_pos), backend=backend)
    assert got_k.dtype == np.float16 and np.array_equal(got_k.view(np.uint16), key.view(np.uint16))
    assert got_k is not key
    exact = ppl_rotary_seed(query, start_pos, None, 32)
    assert_within_storage_ulp(got_q, exact, 4e-6, "ppl_rotary_bypass_key rotated_query")
    assert np.array_equal(got_q[..., 32:].view(np.uint16), query[..., 32:].view(np.uint16))


# =============================================================================================
# Llama-3 (Llama-3.1 rope scaling, NeoX / rotate_half)
# =============================================================================================

def hf_llama3_inv_freq(base=500000.0, dim=128, factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                       old_context_len=8192) -> np.ndarray:
    """transformers' _compute_llama3_parameters, in float64."""
    inv_freq = 1.0 / (base ** (np.arange(0, dim, 2, dtype=np.int64).astype(np.float64) / dim))
    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    inv_freq_llama = np.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth_factor = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed_inv_freq = (1 - smooth_factor) * inv_freq_llama / factor + smooth_factor * inv_freq_llama
    is_medium_freq = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return np.where(is_medium_freq, smoothed_inv_freq, inv_freq_llama)


def rotate_half(x: np.ndarray) -> np.ndarray:
    h = x.shape[-1] // 2
    return np.concatenate([-x[..., h:], x[..., :h]], axis=-1)


def hf_apply_rotary(x: np.ndarray, cos_half: np.ndarray, sin_half: np.ndarray) -> np.ndarray:
    """x [T, H, D]; cos/sin [T, D/2] -> emb = cat(freqs, freqs); x*cos + rotate_half(x)*sin, float64."""
    cos = np.concatenate([cos_half, cos_half], axis=-1)[:, None, :]
    sin = np.concatenate([sin_half, sin_half], axis=-1)[:, None, :]
    x = x.astype(np.float64)
    return x * cos + rotate_half(x) * sin


def _llama_inputs(rng):
    T = 24
    q = rng.standard_normal((T, 32, 128)).astype(BF16)
    k = rng.standard_normal((T, 8, 128)).astype(BF16)
    pos = rng.integers(0, 131072, T).astype(np.int64)
    pos[:5] = [0, 1, 2047, 8191, 131071]
    return q, k, pos


def test_llama3_inv_freq_matches_hf():
    op = operator("llama3.rope", "llama3_8b")
    assert isinstance(op.plan.angles, ExactAngles)
    planned = np.array(op.plan.angles.inv_freq)
    np.testing.assert_allclose(planned, hf_llama3_inv_freq(), rtol=1e-14, atol=0)
    assert op.plan.angles.magnitude == 1.0


def test_llama3_8b_matches_hf(backend):
    op = operator("llama3.rope", "llama3_8b")
    q, k, pos = _llama_inputs(np.random.default_rng(31))
    inv = hf_llama3_inv_freq()
    freqs = pos.astype(np.float64)[:, None] * inv
    got_q, got_k = op.run(q, k, pos, backend=backend)
    for got, x, what in ((got_q, q, "q_rot"), (got_k, k, "k_rot")):
        exact = hf_apply_rotary(x, np.cos(freqs), np.sin(freqs))
        scale = float(np.abs(x.astype(np.float64)).max())
        assert_within_storage_ulp(got, exact, 1e-6 * scale, f"llama3_8b {what}")


def test_llama3_8b_cached_matches_hf(backend):
    op = operator("llama3.rope", "llama3_8b_cached")
    q, k, pos = _llama_inputs(np.random.default_rng(32))
    inv = hf_llama3_inv_freq()
    P = 131072
    table = np.arange(P, dtype=np.float64)[:, None] * inv
    cos, sin = np.cos(table).astype(np.float32), np.sin(table).astype(np.float32)
    got_q, got_k = op.run(q, k, pos, cos, sin, backend=backend)
    for got, x, what in ((got_q, q, "q_rot"), (got_k, k, "k_rot")):
        exact = hf_apply_rotary(x, cos[pos].astype(np.float64), sin[pos].astype(np.float64))
        scale = float(np.abs(x.astype(np.float64)).max())
        assert_within_storage_ulp(got, exact, 1e-6 * scale, f"llama3_8b_cached {what}")
