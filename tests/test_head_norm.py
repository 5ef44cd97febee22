"""Per-head RMSNorm fused into a rope output, `rotate(rmsnorm(x, weight = W, ...))`, on the CPU
backends: the normalized head against a transcription of rmsnorm's numerics (at position 0 the
rotation is the identity, so the output is the stored normalized head itself), the cast order
actually taken, in-place packed QKV, the diagnostics and explain."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import ropegen
from ropegen.ops import reference
from ropegen.spec.diagnostics import SpecError

BACKENDS = ("numpy", "c")


def _spec(dtype: str, extra: str = "", D: int = 64, pairing: str = "neox", rotary: str = "") -> str:
    return f"""
rope r {{
    in q: {dtype}[tokens=T, heads=4, head_dim={D}]
    in k: {dtype}[tokens=T, heads=2, head_dim={D}]
    in positions: i64[T]
    in q_weight: {dtype}[{D}]
    in k_weight: {dtype}[{D}]
    out q_rot = rotate(rmsnorm(q, weight = q_weight, epsilon = 1e-6{extra}))
    out k_rot = rotate(rmsnorm(k, weight = k_weight, epsilon = 1e-6{extra}))
    pairing = {pairing}
    {rotary}
    positions = positions
    angles = computed(base = 10000)
}}
"""


def _norm(x: np.ndarray, w: np.ndarray, eps: float, offset: float, before_scale: bool) -> np.ndarray:
    """rmsnorm's numerics over the last axis in float32 (stash and product), stored in x's type."""
    xs = x.astype(np.float32)
    inv = np.float32(1) / np.sqrt((xs * xs).sum(-1, keepdims=True, dtype=np.float32) / np.float32(x.shape[-1])
                                  + np.float32(eps))
    n = xs * inv
    if before_scale:
        n = n.astype(x.dtype).astype(np.float32)
    return (n * (w.astype(np.float32) + np.float32(offset))).astype(x.dtype)


def _inputs(dtype, T=9, D=64, seed=0):
    rng = np.random.default_rng(seed)
    q = (rng.standard_normal((T, 4, D)) * 3).astype(dtype)
    k = (rng.standard_normal((T, 2, D)) * 3).astype(dtype)
    qw = rng.uniform(0.2, 2.5, D).astype(dtype)
    kw = rng.uniform(0.2, 2.5, D).astype(dtype)
    return q, k, qw, kw


def _ulps(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The distance between a and b in units of the last place of a's type."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    spacing = np.abs(np.spacing(a.astype(np.float32)).astype(np.float64)) * (
        2.0 ** (23 - ml_dtypes.finfo(a.dtype).nmant) if a.dtype != np.float32 else 1.0)
    return np.abs(a64 - b64) / spacing


CASES = [
    ("bf16", ml_dtypes.bfloat16, "", 0.0, True),
    ("f16", np.float16, "", 0.0, True),
    ("bf16", ml_dtypes.bfloat16, ", weight_offset = 1, cast = after_scale", 1.0, False),
    ("f32", np.float32, ", weight_offset = 1, cast = after_scale", 1.0, False),
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name,dtype,extra,offset,before", CASES, ids=[f"{c[0]}{c[2][:14]}" for c in CASES])
def test_the_normalized_head_is_rmsnorm_stored_in_the_input_type(backend, name, dtype, extra, offset, before):
    op = ropegen.compile(_spec(name, extra))["r"]
    q, k, qw, kw = _inputs(dtype)
    pos = np.zeros(q.shape[0], np.int64)       # cos 1, sin 0: the rotation leaves the normalized head
    q_rot, k_rot = op.run(q, k, pos, qw, kw, backend=backend)
    for got, x, w in ((q_rot, q, qw), (k_rot, k, kw)):
        want = _norm(x, w, 1e-6, offset, before)
        ulps = _ulps(want, got)
        if dtype is np.float32:     # the sum of squares in another order moves inv_rms by a few ulps
            assert ulps.max() <= 8, ulps.max()
        else:                       # ... which a 16-bit result absorbs but for a rare flip of one
            assert ulps.max() <= 1, ulps.max()
            assert (ulps == 0).mean() > 0.97


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_cast_order_is_the_one_the_spec_states(backend):
    """bf16 with weights far from 1: rounding before or after the scale differs in many elements."""
    q, k, qw, kw = _inputs(ml_dtypes.bfloat16, T=16, seed=3)
    pos = np.zeros(16, np.int64)
    for extra, before in (("", True), (", cast = after_scale", False)):
        got = ropegen.compile(_spec("bf16", extra))["r"].run(q, k, pos, qw, kw, backend=backend)[0]
        mine = _norm(q, qw, 1e-6, 0.0, before)
        other = _norm(q, qw, 1e-6, 0.0, not before)
        assert (_ulps(mine, got) == 0).mean() > 0.97
        assert (_ulps(other, got) > 0).mean() > 0.05, "the other cast order gives the same bits: the test cannot tell"


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("pairing,rotary", [("neox", ""), ("gptj", "rotary_dim = 32")])
def test_rotated_outputs_match_the_reference(backend, pairing, rotary):
    op = ropegen.compile(_spec("f32", pairing=pairing, rotary=rotary))["r"]
    q, k, qw, kw = _inputs(np.float32, T=11, seed=5)
    pos = np.random.default_rng(1).integers(0, 5000, 11)
    ref = reference.evaluate(op.ir, dict(q=q, k=k, positions=pos, q_weight=qw, k_weight=kw))
    got = op.run(q, k, pos, qw, kw, backend=backend)
    for name, y in zip(("q_rot", "k_rot"), got):
        np.testing.assert_allclose(y, ref[name], rtol=2e-6, atol=2e-6 * np.abs(ref[name]).max())
    # the tail of partial rotary is the normalized head, not the raw input
    if rotary:
        assert _ulps(_norm(q, qw, 1e-6, 0.0, True)[..., 32:], got[0][..., 32:]).max() <= 8


def test_packed_qkv_in_place_leaves_v_alone():
    op = ropegen.compile(_spec("bf16"))["r"]
    rng = np.random.default_rng(7)
    T, D = 5, 64
    qkv = (rng.standard_normal((T, (4 + 2 + 2) * D)) * 2).astype(ml_dtypes.bfloat16)
    _, _, qw, kw = _inputs(ml_dtypes.bfloat16)
    pos = rng.integers(0, 100, T)
    q = qkv[:, :4 * D].reshape(T, 4, D)
    k = qkv[:, 4 * D:6 * D].reshape(T, 2, D)
    want = op.run(q.copy(), k.copy(), pos, qw, kw, backend="c")
    v_before = qkv[:, 6 * D:].copy()
    op.run(q, k, pos, qw, kw, backend="c", inplace=True)
    np.testing.assert_array_equal(qkv[:, 6 * D:].view(np.uint16), v_before.view(np.uint16))
    np.testing.assert_array_equal(q.view(np.uint16), want[0].view(np.uint16))
    np.testing.assert_array_equal(k.view(np.uint16), want[1].view(np.uint16))


@pytest.mark.parametrize("text,code,hint", [
    ("out q_rot = rotate(rmsnorm(q, weight = k_weight2))", "C018", "or [4, 64] (over all its heads of a token"),
    ("out q_rot = copy(rmsnorm(q, weight = q_weight))", "C025", "rotate(...) only"),
    ("out q_rot = rotate(rmsnorm(q, weight = q_weight, eps = 1e-6))", "C010", "epsilon"),
    ("out q_rot = rotate(rmsnorm(q))", "C011", "weight"),
    ("out q_rot = rotate(rmsnorm(q, weight = q_weight, cast = later))", "C009", "before_scale"),
])
def test_diagnostics(text, code, hint):
    with pytest.raises(SpecError) as e:
        ropegen.compile(f"""
rope r {{
    in q: f32[tokens=T, heads=4, head_dim=64]
    in positions: i64[T]
    in q_weight: f32[64]
    in k_weight2: f32[32]
    {text}
    pairing = neox
    positions = positions
    angles = computed(base = 10000)
}}""")
    msg = str(e.value)
    assert code in msg and hint in msg, msg


def test_explain_names_the_norm():
    from ropegen.ops.explain import explain
    op = ropegen.compile(_spec("bf16", ", weight_offset = 1, cast = after_scale"))["r"]
    text = explain(op.plan)
    assert "rotate(q) after rmsnorm over head_dim" in text and "(1.0 + q_weight)" in text


def _norm_over_heads(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    """OLMo 2's norm over all heads of a token ([T, H, D], weight [H, D]) in float32, cast after the
    scale, stored in x's type; the sum of squares in the C kernel's order (16 lanes, head by head)."""
    xs = x.astype(np.float32)
    T, H, D = x.shape
    acc = np.zeros((T, 16), np.float32)
    for h in range(H):
        for i in range(D):
            acc[:, i % 16] += xs[:, h, i] * xs[:, h, i]
    w_ = 8
    while w_:
        acc[:, :w_] += acc[:, w_:2 * w_]
        w_ //= 2
    inv = np.float32(1) / np.sqrt(acc[:, 0] / np.float32(H * D) + np.float32(eps))
    return ((xs * inv[:, None, None]) * w.astype(np.float32)).astype(x.dtype)


@pytest.mark.parametrize("backend", BACKENDS)
def test_olmo2_norm_covers_all_heads_of_a_token(backend):
    op = ropegen.compile(_spec("f32", ", cast = after_scale").replace("q_weight: f32[64]", "q_weight: f32[4, 64]"))["r"]
    q, k, _, kw = _inputs(np.float32, T=6, seed=9)
    qw = np.random.default_rng(2).uniform(0.2, 2.5, (4, 64)).astype(np.float32)
    got = op.run(q, k, np.zeros(6, np.int64), qw, kw, backend=backend)[0]
    want = _norm_over_heads(q, qw, 1e-6)
    assert _ulps(want, got).max() <= 8                   # NumPy sums in its own order
    if backend == "c":
        np.testing.assert_array_equal(got, want)          # C: this very order
    per_head = _norm(q, qw, 1e-6, 0.0, False)            # a norm per head is something else
    assert np.abs(per_head.astype(np.float64) - got).max() > 1e-3


def test_olmo2_norm_in_place_reads_every_head_first():
    op = ropegen.compile(_spec("bf16", ", cast = after_scale").replace("q_weight: bf16[64]", "q_weight: bf16[4, 64]"))["r"]
    q, k, _, kw = _inputs(ml_dtypes.bfloat16, T=5, seed=4)
    qw = np.random.default_rng(3).uniform(0.2, 2.5, (4, 64)).astype(ml_dtypes.bfloat16)
    pos = np.arange(5)
    want = op.run(q.copy(), k.copy(), pos, qw, kw, backend="c")
    op.run(q, k, pos, qw, kw, backend="c", inplace=True)
    np.testing.assert_array_equal(q.view(np.uint16), want[0].view(np.uint16))
