"""M-RoPE positions (`positions = mrope(P, sections = [...], interleaved = ...)`) against an in-test
transcription of transformers' Qwen2-VL `apply_multimodal_rotary_pos_emb` and Qwen3-VL
`apply_interleaved_mrope`, on every backend that runs here; and its shape rules."""
from __future__ import annotations

import numpy as np
import pytest

import ropegen
from ropegen import backends
from ropegen.spec.diagnostics import SpecError

RUNNABLE = [b.name for b in backends.BACKENDS if b.unavailable() is None]


def hf_cos_sin(pos3: np.ndarray, inv: np.ndarray, sections, interleaved: bool):
    """cos, sin [T, D] as transformers builds them for M-RoPE, in float64."""
    freqs = pos3[:, :, None].astype(np.float64) * inv[None, None, :]        # [3, T, D/2]
    if interleaved:          # Qwen3VLTextRotaryEmbedding.apply_interleaved_mrope
        f = freqs[0].copy()
        for dim, offset in enumerate((1, 2), start=1):
            length = sections[dim] * 3
            f[..., offset:length:3] = freqs[dim, ..., offset:length:3]
        emb = np.concatenate([f, f], -1)
        return np.cos(emb), np.sin(emb)
    emb = np.concatenate([freqs, freqs], -1)                                  # [3, T, D]
    cos, sin = np.cos(emb), np.sin(emb)
    split = list(sections) * 2                 # apply_multimodal_rotary_pos_emb: mrope_section * 2
    bounds = np.cumsum(split)[:-1]
    pick = lambda m: np.concatenate([c[i % 3] for i, c in enumerate(np.split(m, bounds, -1))], -1)
    return pick(cos), pick(sin)


def rotate_half(x):
    h = x.shape[-1] // 2
    return np.concatenate([-x[..., h:], x[..., :h]], -1)


@pytest.mark.parametrize("backend", RUNNABLE)
@pytest.mark.parametrize("sections,interleaved", [((16, 24, 24), False), ((24, 20, 20), True), ((8, 28, 28), False)])
def test_mrope_matches_transformers(backend, sections, interleaved):
    d, base = 128, 1000000.0
    op = ropegen.compile(f"""
rope r {{ in q: f32[tokens=T, heads=3, head_dim={d}] in P: i64[3, T]
  out q_rot = rotate(q) pairing = neox
  positions = mrope(P, sections = [{', '.join(map(str, sections))}], interleaved = {'true' if interleaved else 'false'})
  angles = computed(base = {base}) }}""")["r"]
    rng = np.random.default_rng(5)
    T = 9
    pos3 = np.stack([np.arange(T) + 3, rng.integers(0, 40, T), rng.integers(0, 40, T)]).astype(np.int64)
    pos3[:, 0] = [7, 7, 7]       # a text token: all three streams equal
    q = rng.standard_normal((T, 3, d)).astype(np.float32)
    inv = np.array(op.plan.angles.inv_freq)
    cos, sin = hf_cos_sin(pos3, inv, sections, interleaved)
    want = q * cos[:, None] + rotate_half(q.astype(np.float64)) * sin[:, None]
    got = op.run(q, pos3, backend=backend)
    np.testing.assert_allclose(got, want, atol=3e-6, rtol=0)
    # equal streams: plain RoPE at that position
    plain = ropegen.compile(f"""
rope p {{ in q: f32[tokens=T, heads=3, head_dim={d}] in pos: i64[T]
  out q_rot = rotate(q) pairing = neox positions = pos angles = computed(base = {base}) }}""")["p"]
    same = np.repeat(pos3[:1], 3, 0)
    assert np.array_equal(op.run(q, same, backend=backend), plain.run(q, same[0], backend=backend))


@pytest.mark.parametrize("pos_decl,positions,code,msg", [
    ("in P: i64[3, T]", "mrope(P, sections = [16, 24])", "C016", "expected [2, T]"),
    ("in P: i64[3, T]", "mrope(P, sections = [16, 24, 20])", "C018", "sum to 60"),
    ("in P: f32[3, T]", "mrope(P, sections = [16, 24, 24])", "C017", "i32 or i64"),
    ("in P: i64[3, T]", "mrope(P, sections = 64)", "C008", "list of pair counts"),
    ("in P: i64[3, T]", "mrope(P)", "C011", "sections"),
    ("in P: i64[3, T]", "mrope(P, sections = [16, 24, 24], interleaved = 1)", "C008", "true, false"),
])
def test_mrope_shape_rules(pos_decl, positions, code, msg):
    with pytest.raises(SpecError) as e:
        ropegen.compile(f"""
rope r {{ in q: f32[tokens=T, heads=2, head_dim=128] {pos_decl}
  out q_rot = rotate(q) pairing = neox positions = {positions} angles = computed(base = 10000) }}""")
    assert code in str(e.value) and msg in str(e.value), str(e.value)


def test_mrope_needs_neox_or_gptj():
    with pytest.raises(SpecError, match="mrope positions split the pairs of neox or gptj"):
        ropegen.compile("""
rope r { in q: f32[batch=B, seq=S, heads=2, head_dim=8] in P: i64[2, B, S] in c: f32[R, 8] in s: f32[R, 8]
  out q_rot = rotate(q) pairing = block(coeff = 2) positions = mrope(P, sections = [2, 2])
  angles = table(cos = c, sin = s) }""")
