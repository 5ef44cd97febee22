"""Positions at run time: integer arithmetic that would wrap, zero tokens with sequence lengths,
fake-huge inputs and `check=False` are rejected or kept in bounds on every backend.

* arange / glm2d positions near the int64 limits (start + S - 1, start - pad, first_seqlen - 1,
  the glm2d offsets) raise ValueError on the reference and every backend instead of wrapping to
  negative positions; huge positions that do not wrap are fine with computed angles.
* `sequences` lengths that do not sum to zero tokens are rejected (the C kernel used to return
  early before its check).
* the NumPy module allocates its outputs before it scans any input: a broadcast (stride-0) view
  of a huge shape fails at once instead of hanging in a position scan.
* with `check=False` a table lookup never wraps around (NumPy's negative indexing read the last
  row for position -1) and no backend reads outside its inputs.
"""
from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import ropegen
from ropegen.ops import reference
from test_layouts import BACKEND_PARAMS, run_backend

I64_MAX = 2 ** 63 - 1
I64_MIN = -(2 ** 63)

ARANGE = """
rope op {{
    in q: f32[batch=B, seq=S, heads=2, head_dim=8]
    {st_decl}
    {pad_decl}
    {tables}
    out y = rotate(q)
    pairing = neox
    positions = arange(start = {start}{pad})
    angles = {angles}
}}
"""

GLM = """
rope op {
    in q: f32[batch=B, seq=S, heads=2, head_dim=8]
    in st: i64[]
    in first: i64[]
    in pad: i64[B]
    out y = rotate(q)
    pairing = glm2d
    positions = glm2d(start = st, pad = pad, first_seqlen = first)
    angles = computed(base = 10000)
}
"""

_OPS: dict[str, ropegen.Operator] = {}


def compiled(text: str):
    if text not in _OPS:
        (op,) = ropegen.compile(text)
        _OPS[text] = op
    return _OPS[text]


def arange_op(start: str, pad: bool = False, table: bool = False):
    return compiled(ARANGE.format(
        start=start, st_decl="in st: i64[]" if start == "st" else "", pad=", pad = pad" if pad else "", pad_decl="in pad: i64[B]" if pad else "",
        tables="in cos: f32[R, 4]\n    in sin: f32[R, 4]" if table else "",
        angles="table(cos = cos, sin = sin)" if table else "computed(base = 10000)"))


def inputs(op, B: int, S: int, **values) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    a = {"q": rng.standard_normal((B, S, 2, 8)).astype(np.float32)}
    if "st" in op.inputs:
        a["st"] = np.array(0, dtype=np.int64)
    if "pad" in op.inputs:
        a["pad"] = np.zeros(B, dtype=np.int64)
    if "first" in op.inputs:
        a["first"] = np.array(4, dtype=np.int64)
    if "cos" in op.inputs:
        a["cos"] = rng.standard_normal((16, 4)).astype(np.float32)
        a["sin"] = rng.standard_normal((16, 4)).astype(np.float32)
    for k, v in values.items():
        a[k] = np.asarray(v, dtype=np.int64)
    return {n: a[n] for n in op.inputs}


# (case id, spec, inputs (B, S, values)); every one needs an int64 result that does not exist
OVERFLOWS = [
    ("start_literal-pad", lambda: arange_op(str(-2 ** 62), pad=True), (2, 5, {"pad": [0, I64_MAX]})),
    ("start_input+S", lambda: arange_op("st"), (3, 2, {"st": I64_MAX})),
    ("start-pad", lambda: arange_op("st", pad=True), (2, 3, {"st": I64_MIN + 1, "pad": [0, 5]})),
    ("start+S-negative_pad", lambda: arange_op("st", pad=True), (2, 3, {"st": I64_MAX - 5, "pad": [-4, 0]})),
    ("glm_first-1", lambda: compiled(GLM), (1, 3, {"first": I64_MIN})),
    ("glm_first-pad", lambda: compiled(GLM), (2, 3, {"first": I64_MAX - 1, "pad": [-5, 0]})),
    ("glm_offset-prompt", lambda: compiled(GLM), (2, 3, {"st": I64_MAX - 8, "first": -10})),
    ("glm_start+S", lambda: compiled(GLM), (1, 4, {"st": I64_MAX - 1})),
]


@pytest.mark.parametrize("case", [pytest.param(c, id=c[0]) for c in OVERFLOWS])
def test_reference_rejects_position_overflow(case):
    _, make, (B, S, values) = case
    op = make()
    with pytest.raises(ValueError, match="overflow"):
        reference.evaluate(op.ir, inputs(op, B, S, **values))


@pytest.mark.parametrize("backend", BACKEND_PARAMS)
@pytest.mark.parametrize("case", [pytest.param(c, id=c[0]) for c in OVERFLOWS])
def test_backends_reject_position_overflow(case, backend, monkeypatch):
    _, make, (B, S, values) = case
    op = make()
    a = inputs(op, B, S, **values)
    for check in (True, False):
        with pytest.raises(ValueError, match="overflow"):
            run_backend(op, a, backend, monkeypatch, check=check)


@pytest.mark.parametrize("backend", BACKEND_PARAMS)
def test_huge_positions_that_do_not_wrap_are_computed(backend, monkeypatch):
    """The last position is exactly INT64_MAX: nothing wraps and nothing is rejected; every pair keeps
    its norm. NumPy and C evaluate such angles like the reference (CUDA reduces the angle in turns
    in double, which has no fraction left at 1e18 rad: only the norm is asserted there)."""
    op = arange_op("st", pad=True)
    a = inputs(op, 2, 3, st=I64_MAX - 2, pad=[0, 1])
    want = reference.evaluate(op.ir, a)["y"]
    got = run_backend(op, a, backend, monkeypatch)["y"].astype(np.float64)
    x = a["q"].astype(np.float64)
    norm = lambda v: np.hypot(v[..., :4], v[..., 4:])   # neox pairs (j, j + 4)
    np.testing.assert_allclose(norm(got), norm(x), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(norm(want), norm(x), rtol=1e-12)
    if backend in ("numpy", "c"):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("backend", BACKEND_PARAMS)
def test_table_positions_near_the_limit_are_range_checked(backend, monkeypatch):
    op = arange_op("st", table=True)
    a = inputs(op, 2, 3, st=I64_MAX - 2)
    with pytest.raises(ValueError, match="position out of range"):
        run_backend(op, a, backend, monkeypatch)


SEQ = """
rope packed {
    in x: f32[tokens=T, heads=2, head_dim=8]
    in lens: i32[N]
    in cos: f32[R, 4]
    in sin: f32[R, 4]
    out y = rotate(x)
    pairing = neox
    sequences = lens
    positions = in_sequence
    angles = table(cos = cos, sin = sin)
}
"""


@pytest.mark.parametrize("backend", BACKEND_PARAMS)
@pytest.mark.parametrize("lens", [[2, 3], [1], [-1, 1]], ids=str)
def test_zero_tokens_with_nonzero_sequence_lengths_is_rejected(lens, backend, monkeypatch):
    op = compiled(SEQ)
    a = {"x": np.zeros((0, 2, 8), np.float32), "lens": np.array(lens, np.int32),
         "cos": np.ones((4, 4), np.float32), "sin": np.zeros((4, 4), np.float32)}
    with pytest.raises(ValueError, match="sequence lengths"):
        reference.evaluate(op.ir, a)
    for check in (True, False):
        with pytest.raises(ValueError, match="lens"):
            run_backend(op, a, backend, monkeypatch, check=check)
    # zero tokens in zero-length sequences are fine
    out = run_backend(op, dict(a, lens=np.zeros(len(lens), np.int32)), backend, monkeypatch)
    assert out["y"].shape == (0, 2, 8)


IDS = """
rope gather {
    in x: f32[tokens=T, heads=2, head_dim=8]
    in pos: i64[T]
    in cos: f32[R, 4]
    in sin: f32[R, 4]
    out y = rotate(x)
    pairing = neox
    positions = pos
    angles = table(cos = cos, sin = sin)
}
"""


@pytest.mark.parametrize("backend", BACKEND_PARAMS)
def test_check_false_never_wraps_a_table_lookup(backend, monkeypatch):
    """Position -1 must not read the last table row (poisoned with NaN here) whatever `check` says:
    NumPy keeps the lookup inside the table, C always range-checks, CUDA skips the token."""
    op = compiled(IDS)
    rng = np.random.default_rng(3)
    cos = rng.standard_normal((6, 4)).astype(np.float32)
    sin = rng.standard_normal((6, 4)).astype(np.float32)
    cos[-1] = sin[-1] = np.nan
    a = {"x": rng.standard_normal((5, 2, 8)).astype(np.float32),
         "pos": np.array([0, 1, -1, 4, 2], np.int64), "cos": cos, "sin": sin}
    with pytest.raises(ValueError, match="position out of range"):
        run_backend(op, a, backend, monkeypatch)
    try:
        y = run_backend(op, a, backend, monkeypatch, check=False)["y"]
    except ValueError as e:            # C checks positions whatever `check` says
        assert backend == "c" and "position out of range" in str(e)
        return
    good = [0, 1, 3, 4]
    assert np.isfinite(y[good]).all()
    if backend == "numpy":
        assert np.isfinite(y).all(), "position -1 read the last row of the table"
    # the valid tokens are right
    want = reference.evaluate(op.ir, dict(a, pos=np.array([0, 1, 0, 4, 2], np.int64)))["y"]
    np.testing.assert_allclose(y[good], want[good], rtol=1e-5, atol=1e-5)


def test_numpy_allocates_before_scanning_fake_huge_inputs():
    """Broadcast views of 2**46 tokens over a few bytes: the call fails at once (the outputs cannot be
    allocated), instead of scanning 2**46 positions first. Run in a child process with a time limit."""
    code = textwrap.dedent(f'''
        import numpy as np, ropegen
        (op,) = ropegen.compile({IDS!r})
        T = 2 ** 46
        x = np.broadcast_to(np.zeros((1, 2, 8), np.float32), (T, 2, 8))
        pos = np.broadcast_to(np.zeros(1, np.int64), (T,))
        cos = np.ones((4, 4), np.float32)
        try:
            op.run(x, pos, cos, cos.copy(), backend="numpy")
        except (MemoryError, ValueError) as e:
            print("rejected", type(e).__name__)
    ''')
    try:
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("the NumPy module scanned a fake-huge positions view before allocating its outputs")
    assert r.returncode == 0 and "rejected" in r.stdout, r.stderr


# ---------------------------------------------------------------------------------------------
# found by the reliability suite

@pytest.mark.parametrize("positions", ["arange(start = 100)", "glm2d(start = 0, first_seqlen = 50)"])
def test_zero_batch_is_an_empty_call_whatever_its_positions_would_be(positions):
    """No token, no position: the NumPy module used to range-check arange positions of a [1, S]
    stream even for batch 0 and refuse a call the C backend accepted."""
    pairing = "glm2d(inner = neox)" if positions.startswith("glm2d") else "neox"
    width = 2 if positions.startswith("glm2d") else 4
    op = ropegen.compile(f"rope a {{ in x: f32[batch=B, seq=S, heads=1, head_dim=8] in c: f32[P, {width}] "
                         f"in s: f32[P, {width}] out y = rotate(x) pairing = {pairing} positions = {positions} "
                         "angles = table(cos = c, sin = s) }")["a"]
    x = np.ones((0, 3, 1, 8), np.float32)
    c = np.ones((2, width), np.float32)
    for b in [n for n in ("numpy", "c") if not ropegen.backends.get(n).unavailable()]:
        y = op(x, c, c, backend=b)
        assert y.shape == (0, 3, 1, 8) and y.dtype == np.float32, b


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4, 5])
def test_check_glm2d_positions_with_tables_finds_valid_inputs(seed):
    """`ropegen check` drew first_seqlen = S = 1 for a one-token prefill: position first_seqlen - 2 = -1
    is no table row, and the check reported 'no valid inputs' for a valid spec."""
    from ropegen.crosscheck import check_operator
    op = ropegen.compile("rope g2 { in x: f32[batch=B, seq=S, heads=2, head_dim=8] in start: i64[] in fs: i64[] "
                         "in c: f32[P, 2] in s: f32[P, 2] out y = rotate(x) pairing = glm2d "
                         "positions = glm2d(start = start, first_seqlen = fs) angles = table(cos = c, sin = s) }")["g2"]
    rows = check_operator(op, ("numpy",), seed=seed)
    assert rows and all(r.ok for r in rows), [r for r in rows if not r.ok]
