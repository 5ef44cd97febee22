"""`angles = table(cos_sin = C)`: vLLM's and FlashInfer's fused cos_sin_cache (cos in the first half of
each row, sin in the second) rotates exactly as the same values given as two tables, on every backend
that runs here, and its shape rules speak up."""
from __future__ import annotations

import numpy as np
import pytest

import ropegen
from ropegen import backends
from ropegen.spec.diagnostics import SpecError

RUNNABLE = [b.name for b in backends.BACKENDS if b.unavailable() is None]

FUSED = """
rope fused {{ in q: {dt}[tokens=T, heads=3, head_dim=16] in pos: i64[T] in c: f32[P, {w2}]
  out q_rot = rotate(q) pairing = {pairing} rotary_dim = {rot} positions = pos angles = table(cos_sin = c) }}
rope split {{ in q: {dt}[tokens=T, heads=3, head_dim=16] in pos: i64[T] in cos: f32[P, {w}] in sin: f32[P, {w}]
  out q_rot = rotate(q) pairing = {pairing} rotary_dim = {rot} positions = pos angles = table(cos = cos, sin = sin) }}
"""


@pytest.mark.parametrize("backend", RUNNABLE)
@pytest.mark.parametrize("pairing,rot,full", [("neox", 16, False), ("gptj", 8, False), ("neox", 16, True)])
@pytest.mark.parametrize("dt", ["f32", "bf16"])
def test_fused_cache_equals_two_tables(backend, pairing, rot, full, dt):
    w = rot if full else rot // 2        # a half-width table, or HF's full-width cat(freqs, freqs)
    prog = ropegen.compile(FUSED.format(dt=dt, pairing=pairing, rot=rot, w=w, w2=2 * w))
    rng = np.random.default_rng(7)
    rows = 50
    ang = rng.uniform(-3, 3, (rows, w))
    cache = np.concatenate([np.cos(ang), np.sin(ang)], -1).astype(np.float32)
    pos = np.array([0, 49, 3, 3, 17], np.int64)
    q = rng.standard_normal((pos.size, 3, 16)).astype(prog["fused"].ir.inputs[0].dtype.np_dtype)
    got = prog["fused"].run(q, pos, cache, backend=backend)
    want = prog["split"].run(q, pos, np.ascontiguousarray(cache[:, :w]), np.ascontiguousarray(cache[:, w:]),
                             backend=backend)
    assert np.array_equal(np.asarray(got).view(np.uint8), np.asarray(want).view(np.uint8))
    if backend != "numpy":     # a position past the cache is refused, as with two tables
        with pytest.raises(ValueError, match="position"):
            prog["fused"].run(q, np.array([0, 50, 1, 1, 1], np.int64), cache, backend=backend)


@pytest.mark.parametrize("angles,code,hint", [
    ("table(cos_sin = c)", "C018", "[ROWS, 2W]"),                                   # c is [P, 7]: odd
    ("table(cos_sin = c2, cos = c2)", "C010", "either cos_sin or cos and sin"),
    ("table(cos = c2)", "C011", "table(cos_sin = CACHE)"),
    ("table(cos = c2, sin = c2)", "C018", "table(cos_sin = ...)"),
])
def test_cache_shape_rules(angles, code, hint):
    with pytest.raises(SpecError) as e:
        ropegen.compile(f"""
rope r {{ in q: f32[tokens=T, heads=2, head_dim=8] in pos: i64[T] in c: f32[P, 7] in c2: f32[P, 8]
  out q_rot = rotate(q) pairing = neox positions = pos angles = {angles} }}""")
    assert code in str(e.value) and hint in str(e.value), str(e.value)


def test_a_cache_needs_positions():
    with pytest.raises(SpecError, match="indexed by position"):
        ropegen.compile("""
rope r { in q: f32[tokens=T, heads=2, head_dim=8] in c: f32[T, 8]
  out q_rot = rotate(q) pairing = neox angles = table(cos_sin = c) }""")
