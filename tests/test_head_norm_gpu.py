"""The per-head RMSNorm of the GPU targets' RoPE kernels (`rotate(rmsnorm(x, weight = W, ...))`,
templates/gpu/_head_norm.inc.j2), run for real on OpenCL: the normalized heads bit for bit against
the C kernel and a NumPy transcription of the cast order (positions 0 make the rotation the
identity, so the output is the normalized head itself), the rotated results against C, in place
over views of a packed QKV tensor (v untouched), and the whole-head kernel shape that makes in
place race-free; and OLMo 2's norm over all heads of a token (weight [heads, head_dim]: one thread
per token), against NumPy, in place, and under a launch with more head groups."""
from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import ropegen
from ropegen.backends.c.backend import CBackend
from ropegen.backends.opencl import backend as clb
from ropegen.crosscheck import compare
from ropegen.lower.gpu.config import NORM_LANES as LANES
from ropegen.lower.gpu.config import rope_cfg
from ropegen.lower.gpu.launch import rope_launch
from ropegen.ops.inputs import CASES, make_inputs

ROOT = Path(__file__).resolve().parent.parent
WHY = clb.unavailable()
device = pytest.mark.skipif(WHY is not None, reason=f"OpenCL cannot run here: {WHY}")
needs_c = pytest.mark.skipif(CBackend().unavailable() is not None, reason=f"C: {CBackend().unavailable()}")
OPS = {op.name: op for op in ropegen.compile(ROOT / "examples" / "qk_norm_rope.rope")}

# bf16 with Gemma's (1 + w) and the cast after the scale: the branch the examples run only in f32,
# where both cast orders agree
AFTER = """
rope bf16_after_scale {
    in q:         bf16[tokens=T, heads=4, head_dim=64]
    in positions: i64[T]
    in q_weight:  bf16[64]
    out q_rot = rotate(rmsnorm(q, weight = q_weight, epsilon = 1e-5, weight_offset = 1, cast = after_scale))
    pairing   = neox
    positions = positions
    angles    = computed(base = 10000)
}
"""
# OLMo 2's norm over all heads of a token (weight [heads, head_dim]) in bf16, head_dim 40 (a tail
# after the 16-lane rounds in every head), Gemma's offset: the over-heads branch the example runs
# only in f32 with head_dim 128
OVER = """
rope bf16_over_heads {
    in q:         bf16[tokens=T, heads=3, head_dim=40]
    in k:         bf16[tokens=T, heads=2, head_dim=40]
    in positions: i64[T]
    in q_weight:  bf16[3, 40]
    in k_weight:  bf16[40]
    out q_rot = rotate(rmsnorm(q, weight = q_weight, epsilon = 1e-5, weight_offset = 1))
    out k_rot = rotate(rmsnorm(k, weight = k_weight, epsilon = 1e-5))
    pairing   = neox
    positions = positions
    angles    = computed(base = 10000)
}
"""
OPS.update({op.name: op for op in ropegen.compile(AFTER)})
OPS.update({op.name: op for op in ropegen.compile(OVER)})
OVER_HEADS = sorted(n for n, op in OPS.items() if any(s.norm.over_heads for s in op.plan.streams))
NAMES = sorted(OPS)


def _storage(dt) -> np.dtype:
    return np.dtype(ml_dtypes.bfloat16) if dt.name == "bf16" else np.dtype(dt.np_dtype)


def _inputs(op, seed: int, zero_positions: bool = False) -> list[np.ndarray]:
    arrays = make_inputs(op.ir, CASES[1], seed=seed)
    rng = np.random.default_rng(seed)
    for s in op.plan.streams:       # weights far from 1, so a skipped or misplaced scale shows
        w = arrays[s.norm.weight]
        arrays[s.norm.weight] = rng.uniform(0.3, 2.5, w.shape).astype(w.dtype)
    if zero_positions:
        arrays["positions"] = np.zeros_like(arrays["positions"])
    return [np.ascontiguousarray(arrays[n]) for n in op.inputs]


def transcribe(x: np.ndarray, w: np.ndarray, norm, cast: str, over: bool | None = None) -> np.ndarray:
    """The normalized heads of x ([..., heads, head_dim]) under `cast`, operation by operation in
    NumPy (each float32/float64 operation rounds once, as the kernels' do). A norm over heads
    (over_heads, or forced by `over`) sums head by head into the same partial sums."""
    stash, prod = norm.stash.np_dtype.type, norm.product.np_dtype.type
    over = norm.over_heads if over is None else over
    xs = x.astype(stash)
    rows = xs.reshape(x.shape[:-2] + (1, -1)) if over else xs     # the elements of one sum, in order
    acc = np.zeros(rows.shape[:-1] + (LANES,), stash)  # element e of a head into partial sum e % LANES, then a tree
    for j in range(rows.shape[-1]):
        e = j % x.shape[-1]
        acc[..., e % LANES] = (acc[..., e % LANES] + rows[..., j] * rows[..., j]).astype(stash)
    w_ = LANES // 2
    while w_:
        acc[..., :w_] = (acc[..., :w_] + acc[..., w_:2 * w_]).astype(stash)
        w_ //= 2
    total = acc[..., 0]
    inv = (stash(1) / np.sqrt(total / stash(rows.shape[-1]) + stash(norm.epsilon_stash))).astype(stash)
    normalized = (xs * inv[..., None]).astype(stash)
    v = normalized.astype(x.dtype).astype(prod) if cast == "before_scale" else normalized.astype(prod)
    scale = (prod(norm.weight_offset) + w.astype(prod)).astype(prod) if norm.weight_offset else w.astype(prod)
    return (v * scale).astype(x.dtype)


def _bits(a) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.uint8)


def _ulps(a: np.ndarray, b: np.ndarray) -> int:
    """The largest distance in units of the storage type's last place between a and b."""
    ia, ib = (np.ascontiguousarray(v).view(f"i{v.dtype.itemsize}").astype(np.int64) for v in (a, b))
    ia = np.where(ia < 0, np.iinfo(np.int64).min - ia, ia)    # sign-magnitude to a monotone scale
    ib = np.where(ib < 0, np.iinfo(np.int64).min - ib, ib)
    return int(np.max(np.abs(ia - ib))) if ia.size else 0


def test_kernels_of_a_normalized_operator_are_whole_head():
    """One thread per token (head groups cut at real heads): a head's sum is read before any of it
    is stored, which is what makes in place race-free."""
    for name in NAMES:
        cfg = rope_cfg(OPS[name].plan)
        for k in cfg.kernels:
            assert k.whole_head and k.threads_per_token == 1 and k.n_tiles > 1, (name, k.name)
        assert cfg.real_heads * cfg.split == cfg.total_heads
        over = any(s.norm.over_heads for s in OPS[name].plan.streams)
        for k in cfg.kernels:      # a norm over heads: every head of a token in one thread
            assert k.over_heads == over and (rope_launch(cfg, k, 1).head_groups == 1 or not over), (name, k.name)
    assert OVER_HEADS
    plain = rope_cfg(ropegen.compile(ROOT / "examples" / "llama3.rope")["llama3_8b"].plan)
    assert not plain.vec.whole_head and plain.vec.threads_per_token == plain.vec.n_tiles


@device
@needs_c
@pytest.mark.parametrize("name", NAMES)
def test_normalized_heads_bit_for_bit(name):
    """Positions 0: cos 1, sin 0, so every output element is its normalized value. OpenCL equals C
    and the transcription of the declared cast order to the bit; the other cast order and the
    un-normalized input differ (where they can: f32 storage rounds nothing between the two)."""
    op = OPS[name]
    args = _inputs(op, seed=5, zero_positions=True)
    got = op.run_all(*args, backend="opencl")
    want_c = op.run_all(*args, backend="c")
    for g, c, s in zip(got, want_c, op.plan.streams):
        x, w = args[op.inputs.index(s.src)], args[op.inputs.index(s.norm.weight)]
        assert np.array_equal(_bits(g), _bits(c)), (name, s.out)
        assert np.array_equal(_bits(g), _bits(transcribe(x, w, s.norm, s.norm.cast))), (name, s.out)
        assert not np.array_equal(_bits(g), _bits(x)), (name, s.out, "the norm was skipped")
        other = "after_scale" if s.norm.cast == "before_scale" else "before_scale"
        if x.dtype.itemsize < 4:
            assert not np.array_equal(_bits(g), _bits(transcribe(x, w, s.norm, other))), (name, s.out, other)
        if s.norm.over_heads:      # one sum over the token's heads, not one per head
            assert not np.array_equal(_bits(g), _bits(transcribe(x, w, s.norm, s.norm.cast, over=False))), name


@device
@needs_c
@pytest.mark.parametrize("name", NAMES)
def test_rotated_against_c(name):
    """Any positions: the rotation reads the stored normalized head, as C does; half types agree to
    one unit in the last place (the angle functions may differ by one), f32 to the cross-check's
    tolerance (an angle's last bit, scaled by cancellation, shows there)."""
    op = OPS[name]
    for seed in (1, 2):
        args = _inputs(op, seed=seed)
        got = op.run_all(*args, backend="opencl")
        want = op.run_all(*args, backend="c")
        magnitude = max(float(np.max(np.abs(a.astype(np.float64)))) for a in args if a.dtype.itemsize >= 2
                        and a.dtype.kind in "fV")
        for g, c in zip(got, want):
            if g.dtype.itemsize < 4:       # f16 / bf16: one unit in the last place at most
                assert _ulps(g, c) <= 1, (name, seed, _ulps(g, c))
            else:                          # f32: cancellation in the rotation; the cross-check tolerance
                assert compare(g, c.astype(np.float64), op.plan.storage, magnitude)[2], (name, seed)


@device
@pytest.mark.parametrize("numpy_views", [False, True], ids=["pyopencl", "numpy"])
def test_in_place_on_a_packed_qkv_tensor(numpy_views):
    """q and k as views of one [T, Hq + 2 Hk, D] tensor, rotated in place: they equal the
    out-of-place results, v is not touched."""
    import pyopencl.array as cla
    op = OPS["packed_qkv_qk_norm_rope"]
    args = _inputs(op, seed=9)
    q, k = args[0], args[1]
    hq, hk = q.shape[1], k.shape[1]
    want = op.run_all(*args, backend="opencl")
    rng = np.random.default_rng(4)
    v = rng.standard_normal((q.shape[0], hk, q.shape[2])).astype(q.dtype)
    qkv = np.concatenate([q, k, v], axis=1)
    rest = args[2:]
    if numpy_views:
        got = op.run_all(qkv[:, :hq], qkv[:, hq:hq + hk], *rest, backend="opencl", inplace=True)
        out = qkv
    else:
        queue = clb.default_queue()
        dev = cla.to_device(queue, qkv)
        got = op.run_all(dev[:, :hq], dev[:, hq:hq + hk], *rest, backend="opencl", inplace=True)
        out = dev.get()
    assert len(got) == 2
    assert np.array_equal(_bits(out[:, :hq]), _bits(want[0]))
    assert np.array_equal(_bits(out[:, hq:hq + hk]), _bits(want[1]))
    assert np.array_equal(_bits(out[:, hq + hk:]), _bits(v)), "v changed"


@device
def test_strided_weight_and_scalar_kernel():
    """A weight read through its stride (every other element of a wider array) and a q with a
    non-unit head_dim stride (the scalar kernel) give the dense call's bits."""
    op = OPS["qwen3_qk_norm_rope"]
    args = _inputs(op, seed=3)
    want = op.run_all(*args, backend="opencl")
    wide = [np.repeat(a, 2)[::2] if n.endswith("weight") else a for n, a in zip(op.inputs, args)]
    assert not wide[op.inputs.index("q_weight")].flags.c_contiguous
    q = args[0]
    spaced = np.zeros(q.shape[:2] + (2 * q.shape[2],), q.dtype)
    spaced[..., ::2] = q
    wide[0] = spaced[..., ::2]
    got = op.run_all(*wide, backend="opencl")
    for g, w in zip(got, want):
        assert np.array_equal(_bits(g), _bits(w))


@device
@pytest.mark.parametrize("name", OVER_HEADS)
def test_norm_over_heads_against_numpy(name):
    """A norm over all heads of a token (OLMo 2): the OpenCL kernels (vector, and scalar through a
    spaced-out q and a transposed [heads, head_dim] weight view: the same bits) against the NumPy
    backend: one unit in the last place in half types, the cross-check's tolerance in f32."""
    op = OPS[name]
    args = _inputs(op, seed=6)
    want = op.run_all(*args, backend="numpy")
    got = op.run_all(*args, backend="opencl")
    magnitude = max(float(np.max(np.abs(a.astype(np.float64)))) for a in args if a.dtype.kind in "fV")
    q = args[0]
    spaced = np.zeros(q.shape[:2] + (2 * q.shape[2],), q.dtype)
    spaced[..., ::2] = q
    odd = [spaced[..., ::2]] + [np.ascontiguousarray(a.T).T if a.ndim == 2 and n.endswith("weight") else a
                                for n, a in zip(op.inputs[1:], args[1:])]
    assert any(not a.flags.c_contiguous for a in odd[1:])
    strided = op.run_all(*odd, backend="opencl")
    for g, s_, w in zip(got, strided, want):
        assert np.array_equal(_bits(g), _bits(s_)), name
        if g.dtype.itemsize < 4:
            assert _ulps(g, w) <= 1, (name, _ulps(g, w))
        else:                      # f32: cancellation in the rotation; the cross-check tolerance
            assert compare(g, w.astype(np.float64), op.plan.storage, magnitude)[2], name


@device
@pytest.mark.parametrize("name", OVER_HEADS)
def test_norm_over_heads_in_place_on_a_packed_tensor(name):
    """q and k normalized over their heads, as views of one [T, Hq + Hk + Hk, D] tensor rotated in
    place: every head's sum is read before any head is stored, so the bits equal the out-of-place
    call's and the third part is not touched."""
    op = OPS[name]
    args = _inputs(op, seed=8)
    q, k = args[0], args[1]
    hq, hk = q.shape[1], k.shape[1]
    want = op.run_all(*args, backend="opencl")
    v = np.random.default_rng(2).standard_normal((q.shape[0], hk, q.shape[2])).astype(q.dtype)
    qkv = np.concatenate([q, k, v], axis=1)
    got = op.run_all(qkv[:, :hq], qkv[:, hq:hq + hk], *args[2:], backend="opencl", inplace=True)
    assert len(got) == 2
    assert np.array_equal(_bits(qkv[:, :hq]), _bits(want[0]))
    assert np.array_equal(_bits(qkv[:, hq:hq + hk]), _bits(want[1]))
    assert np.array_equal(_bits(qkv[:, hq + hk:]), _bits(v)), "the rest changed"


@device
def test_norm_over_heads_with_more_head_groups(monkeypatch):
    """A launch with head_groups > 1 (allowed by the kernel's comment for other operators): threads
    of groups beyond the first return, so in place still applies the norm and rotation once."""
    from ropegen.lower.gpu import launch
    op = OPS["bf16_over_heads"]
    args = _inputs(op, seed=10)
    want = op.run_all(*args, backend="opencl")
    monkeypatch.setattr(launch, "head_groups", lambda cfg, kernel, tokens: 3)
    q, k = args[0].copy(), args[1].copy()
    got = op.run_all(q, k, *args[2:], backend="opencl", inplace=True)
    assert np.array_equal(_bits(got[0]), _bits(want[0])) and np.array_equal(_bits(q), _bits(want[0]))
    assert np.array_equal(_bits(k), _bits(want[1]))
