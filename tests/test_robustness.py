"""Adversarial inputs and names found in review: every backend rejects or handles them cleanly."""
from __future__ import annotations


import numpy as np
import pytest

import ropegen
from ropegen import backends, cli
from ropegen.spec.diagnostics import SpecError

RUNNABLE = [b.name for b in backends.BACKENDS if b.unavailable() is None]

SPEC = """
rope r { in x: f32[tokens=T, heads=2, head_dim=8] in pos: i32[T]
  out y = rotate(x) pairing = neox positions = pos angles = computed(base = 10000) }
rope prefixed { in rg_x: f32[tokens=T, heads=2, head_dim=8] in ropegen_pos: i32[T]
  out y = rotate(rg_x) pairing = neox positions = ropegen_pos angles = computed(base = 10000) }
rope packed { in x: f32[tokens=T, heads=2, head_dim=8] in seqlen: i64[N]
  out y = rotate(x) pairing = neox sequences = seqlen positions = in_sequence angles = computed(base = 10000) }
rope shadow { in x: f32[tokens=T, heads=2, head_dim=8] in t_x: f32[tokens=T, heads=2, head_dim=8] in sym: i32[T]
  out z = copy(t_x) out w = rotate(x) pairing = neox positions = sym angles = computed(base = 10000) }
rmsnorm n { in x: f32[N, 8] in w: f32[8] out y }
"""


@pytest.fixture(scope="module")
def prog():
    return ropegen.compile(SPEC)


@pytest.mark.parametrize("backend", RUNNABLE)
def test_zero_tokens_and_rows(prog, backend):
    y = prog["r"].run(np.empty((0, 2, 8), np.float32), np.zeros(0, np.int32), backend=backend)
    assert y.shape == (0, 2, 8)
    assert prog["n"].run(np.empty((0, 8), np.float32), np.ones(8, np.float32), backend=backend).shape == (0, 8)


@pytest.mark.parametrize("backend", RUNNABLE)
def test_misaligned_input_is_read_correctly(prog, backend):
    raw = np.zeros(3 * 2 * 8 * 4 + 4, np.uint8)
    x = np.ndarray((3, 2, 8), np.float32, buffer=raw, offset=1)
    x[...] = np.random.default_rng(0).standard_normal((3, 2, 8))
    pos = np.arange(3, dtype=np.int32)
    np.testing.assert_array_equal(prog["r"].run(x, pos, backend=backend),
                                  prog["r"].run(np.array(x), pos, backend=backend))


@pytest.mark.parametrize("backend", RUNNABLE)
def test_internal_prefixes_in_names_compile_and_run(prog, backend):
    assert prog["prefixed"].run(np.ones((3, 2, 8), np.float32), np.arange(3, dtype=np.int32),
                                backend=backend).shape == (3, 2, 8)


@pytest.mark.parametrize("backend", RUNNABLE)
def test_names_like_generated_locals_do_not_shadow_inputs(prog, backend):
    rng = np.random.default_rng(1)
    x, tx = rng.random((3, 2, 8), dtype=np.float32), rng.random((3, 2, 8), dtype=np.float32)
    z, _ = prog["shadow"].run(x, tx, np.arange(3, dtype=np.int32), backend=backend)
    np.testing.assert_array_equal(z, tx)


@pytest.mark.parametrize("backend", RUNNABLE)
@pytest.mark.parametrize("lens", [[2**63 - 1, 2**63 - 1, 5], [-1, 4], [4, 0, -1], [1, 1]])
def test_bad_sequence_lengths_are_value_errors(prog, backend, lens):
    with pytest.raises(ValueError, match="seqlen"):
        prog["packed"].run(np.ones((3, 2, 8), np.float32), np.array(lens, dtype=np.int64), backend=backend)


@pytest.mark.parametrize("text,code", [
    ("rope r { in x: f32[tokens=T, heads=2, head_dim=8] in pos: i32[T] out y = rotate(x) out y_sb = copy(x) "
     "pairing = neox positions = pos angles = computed(base=10000) }", "C036"),
    ("rope r { in x: f32[tokens=T, heads=2, head_dim=8] in pos: i64[T] in c: f32[P, 4] out y = rotate(x) "
     "pairing = neox positions = pos angles = table(cos=c, sin=c) }", "C018"),
    ("rope r { in x: f32[tokens=T, heads=2, head_dim=8] in pos: i32[T] out y = rotate(x) pairing = neox "
     "positions = pos angles = computed(base=10000, scaling=linear(factor=1e-320)) }", "C029"),
    ("rope r { in x: f32[tokens=T, heads=2, head_dim=8] in pos: i32[T] out y = rotate(x) pairing = neox "
     "positions = pos angles = computed(base=10000, magnitude=1e308) }", "C029"),
    ("rmsnorm n { in x: f32[N, 8] in w: f32[8] out y epsilon = 1e300 }", "C029"),
])
def test_specs_that_would_break_a_backend_are_diagnosed(text, code):
    with pytest.raises(SpecError) as info:
        ropegen.compile(text)
    assert [d.code for d in info.value.diagnostics] == [code]


def test_check_sizes_tables_for_every_positions_kind(tmp_path, capsys):
    spec = tmp_path / "tables.rope"
    spec.write_text("""
rope ar { in x: f32[batch=B, seq=S, heads=2, head_dim=8] in start: i64[] in pad: i64[B]
  in c: f32[P, 4] in s: f32[P, 4] out y = rotate(x) pairing = neox
  positions = arange(start = start, pad = pad) angles = table(cos = c, sin = s) }
rope fixed { in x: f32[tokens=T, heads=2, head_dim=8] in pos: i64[T] in c: f32[16, 4] in s: f32[16, 4]
  out y = rotate(x) pairing = gptj positions = pos angles = table(cos = c, sin = s) }
rope g2 { in x: f32[batch=B, seq=S, heads=2, head_dim=8] in start: i64[] in fs: i64[]
  in c: f32[P, 2] in s: f32[P, 2] out y = rotate(x) pairing = glm2d
  positions = glm2d(start = start, first_seqlen = fs) angles = table(cos = c, sin = s) }
""")
    assert cli.main(["check", str(spec)]) == 0
    assert "MISMATCH" not in capsys.readouterr().out
