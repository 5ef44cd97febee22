"""`sequences = indptr(I)`: packed sequences given as FlashInfer's offsets [N + 1] (0 first, the token
count last) rotate exactly as the same sequences given as lengths, on every backend that runs here;
malformed offsets are refused with the same message everywhere, and nothing out of bounds is read."""
from __future__ import annotations

import numpy as np
import pytest

import ropegen
from ropegen import backends
from ropegen.ops import reference

RUNNABLE = [b.name for b in backends.BACKENDS if b.unavailable() is None]

SPECS = """
rope by_ptr {{ in q: f32[tokens=T, heads=3, head_dim=16] in I: {it}[N1] in c: f32[R, 8] in s: f32[R, 8]
  out q_rot = rotate(q) pairing = neox sequences = indptr(I) positions = in_sequence angles = table(cos = c, sin = s) }}
rope by_len {{ in q: f32[tokens=T, heads=3, head_dim=16] in L: {it}[N] in c: f32[R, 8] in s: f32[R, 8]
  out q_rot = rotate(q) pairing = neox sequences = L positions = in_sequence angles = table(cos = c, sin = s) }}
rope computed {{ in q: bf16[tokens=T, heads=2, head_dim=16] in I: {it}[N1]
  out q_rot = rotate(q) pairing = gptj sequences = indptr(I) positions = in_sequence angles = computed(base = 10000) }}
"""


@pytest.mark.parametrize("backend", RUNNABLE)
@pytest.mark.parametrize("it", ["i32", "i64"])
@pytest.mark.parametrize("lens", [[3, 0, 5, 1], [9], [0, 0, 9]])
def test_indptr_equals_lengths(backend, it, lens):
    prog = ropegen.compile(SPECS.format(it=it))
    rng = np.random.default_rng(1)
    T = sum(lens)
    q = rng.standard_normal((T, 3, 16)).astype(np.float32)
    c, s = (rng.uniform(-1, 1, (12, 8)).astype(np.float32) for _ in range(2))
    dt = np.int32 if it == "i32" else np.int64
    ptr = np.concatenate([[0], np.cumsum(lens)]).astype(dt)
    got = prog["by_ptr"].run(q, ptr, c, s, backend=backend)
    want = prog["by_len"].run(q, np.array(lens, dt), c, s, backend=backend)
    assert np.array_equal(got, want)
    qb = q[:, :2].astype(prog["computed"].ir.inputs[0].dtype.np_dtype)
    ref = reference.evaluate(prog["computed"].ir, {"q": qb, "I": ptr})
    out = prog["computed"].run(qb, ptr, backend=backend)
    np.testing.assert_allclose(np.asarray(out, np.float64), ref["q_rot"], atol=0.02)


@pytest.mark.parametrize("backend", RUNNABLE)
@pytest.mark.parametrize("ptr", [[1, 3, 9], [0, 5, 3, 9], [0, 4, 8], [0, 4, 10], [], [0, -1, 9]])
def test_malformed_indptr_is_refused(backend, ptr):
    prog = ropegen.compile(SPECS.format(it="i64"))
    q = np.ones((9, 3, 16), np.float32)
    c = s = np.zeros((12, 8), np.float32)
    with pytest.raises(ValueError, match="indptr must start at 0, never decrease and end at the 9"):
        prog["by_ptr"].run(q, np.array(ptr, np.int64), c, s, backend=backend)
