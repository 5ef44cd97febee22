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


OFFSETS = """
rope off {{ in q: f32[tokens=T, heads=3, head_dim=16] in I: {it}[N1] in o: {it}[N] in c: f32[R, 8] in s: f32[R, 8]
  out q_rot = rotate(q) pairing = neox sequences = indptr(I) positions = in_sequence(start = o)
  angles = table(cos = c, sin = s) }}
rope by_ids {{ in q: f32[tokens=T, heads=3, head_dim=16] in pos: i64[T] in c: f32[R, 8] in s: f32[R, 8]
  out q_rot = rotate(q) pairing = neox positions = pos angles = table(cos = c, sin = s) }}
rope lens_off {{ in q: bf16[tokens=T, heads=2, head_dim=16] in L: {it}[N] in o: i64[N]
  out q_rot = rotate(q) pairing = gptj sequences = L positions = in_sequence(start = o) angles = computed(base = 10000) }}
"""


@pytest.mark.parametrize("backend", RUNNABLE)
@pytest.mark.parametrize("it", ["i32", "i64"])
def test_offsets_place_each_sequence(backend, it):
    prog = ropegen.compile(OFFSETS.format(it=it))
    rng = np.random.default_rng(4)
    lens, offs = [3, 0, 5, 1], [7, 2, 30, 0]
    T = sum(lens)
    dt = np.int32 if it == "i32" else np.int64
    ptr = np.concatenate([[0], np.cumsum(lens)]).astype(dt)
    pos = np.concatenate([np.arange(n) + o for n, o in zip(lens, offs)]).astype(np.int64)
    q = rng.standard_normal((T, 3, 16)).astype(np.float32)
    c, s = (rng.uniform(-1, 1, (40, 8)).astype(np.float32) for _ in range(2))
    got = prog["off"].run(q, ptr, np.array(offs, dt), c, s, backend=backend)
    assert np.array_equal(got, prog["by_ids"].run(q, pos, c, s, backend=backend))
    # the same through lengths, computed angles: against the reference
    qb = q[:, :2].astype(prog["lens_off"].ir.inputs[0].dtype.np_dtype)
    arrays = {"q": qb, "L": np.array(lens, dt), "o": np.array(offs, np.int64)}
    ref = reference.evaluate(prog["lens_off"].ir, arrays)
    out = prog["lens_off"].run(qb, arrays["L"], arrays["o"], backend=backend)
    np.testing.assert_allclose(np.asarray(out, np.float64), ref["q_rot"], atol=0.05)


@pytest.mark.parametrize("backend", RUNNABLE)
def test_offsets_must_fit(backend):
    prog = ropegen.compile(OFFSETS.format(it="i64"))
    q = np.ones((4, 3, 16), np.float32)
    c = s = np.zeros((12, 8), np.float32)
    ptr = np.array([0, 2, 4], np.int64)
    with pytest.raises(ValueError, match="offset"):          # 3 offsets for 2 sequences
        prog["off"].run(q, ptr, np.array([0, 1, 2], np.int64), c, s, backend=backend)
    big = np.iinfo(np.int64).max
    with pytest.raises(ValueError, match="overflows int64"):
        prog["lens_off"].run(np.ones((4, 2, 16), prog["lens_off"].ir.inputs[0].dtype.np_dtype),
                             np.array([2, 2], np.int64), np.array([0, big], np.int64), backend=backend)


def test_offsets_of_lengths_share_their_size():
    from ropegen.spec.diagnostics import SpecError
    with pytest.raises(SpecError, match="C016.*one entry per sequence"):
        ropegen.compile("""rope r { in q: f32[tokens=T, heads=2, head_dim=8] in L: i32[N] in o: i32[M]
  out q_rot = rotate(q) pairing = neox sequences = L positions = in_sequence(start = o) angles = computed(base = 10000) }""")
