"""Bound calls in C (backends/c/fastcall.c) and the kernels' words entry point.

The words entry point (`ropegen_NAME_words`, every parameter as one int64) gives the same bits as the
kernel's own prototype, for RoPE and RMSNorm. The extension's calls give what the Python path gives:
the same outputs, the same refusals, no reference leaked or lost (outputs, inputs, the error path),
outputs allocated on a line when large, more outputs than its stack holds. test_bound_call.py runs
all of Operator.bind both ways."""
from __future__ import annotations

import ctypes
import os
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import ropegen
from ropegen.backends.c import fastcall
from ropegen.backends.c.backend import CBackend

BF16 = ml_dtypes.bfloat16
ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(CBackend().unavailable() is not None, reason=str(CBackend().unavailable()))

needs_ext = pytest.mark.skipif(fastcall.unavailable() is not None,
                               reason=f"bound calls in C unavailable: {fastcall.unavailable()}")

ROPE = """
rope r {
    in q:   bf16[tokens=T, heads=4, head_dim=64]
    in k:   bf16[tokens=T, heads=2, head_dim=64]
    in pos: i64[T]
    in cos: f32[P, 32]
    in sin: f32[P, 32]
    out q_rot = rotate(q)
    out k_rot = rotate(k)
    pairing = neox
    positions = pos
    angles = table(cos = cos, sin = sin)
}
rmsnorm n {
    in x:     f32[N, 256]
    in scale: f32[256]
    out y
}
"""


@pytest.fixture(scope="module")
def ops():
    return ropegen.compile(ROPE)


ROWS = 64      # table rows: positions from 0 to 63


def _qk(tokens: int, seed: int):
    """q, k, positions, cos and sin of the rope operator above."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((tokens, 4, 64)).astype(BF16), rng.standard_normal((tokens, 2, 64)).astype(BF16),
            rng.integers(0, ROWS, tokens).astype(np.int64), *_TABLES)


_TABLES = tuple(np.random.default_rng(99).uniform(-1, 1, (ROWS, 32)).astype(np.float32) for _ in range(2))


def _bits(a) -> bytes:
    return np.ascontiguousarray(a).view(np.uint8).tobytes()


def test_words_entry_point_gives_the_kernels_bits(ops):
    """ropegen_NAME_words(words) is ropegen_NAME(words[0], words[1], ...): checked through ctypes alone,
    so a wrong cast or order in the template fails here whether or not the extension builds."""
    for name in ("r", "n"):
        op = ops[name]
        kern = op.kernel("c")
        if name == "r":
            arrays = _qk(5, 1)
        else:
            rng = np.random.default_rng(2)
            arrays = (rng.standard_normal((3, 256)).astype(np.float32), rng.standard_normal(256).astype(np.float32))
        want = op.run(*arrays, backend="c", threads=1)
        want = want if isinstance(want, tuple) else (want,)
        b = kern.bind(*arrays, threads=1)
        words = (ctypes.c_int64 * len(b.values))(*b.values)
        entry = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)(kern.words)
        assert entry(ctypes.addressof(words)) == 0
        assert [_bits(o) for o in b.outputs] == [_bits(w) for w in want]
        # a position out of range: the status comes back through the words entry point too
        if name == "r":
            bad = arrays[2].copy()
            bad[-1] = ROWS
            b = kern.bind(arrays[0], arrays[1], bad, *arrays[3:], threads=1)
            words = (ctypes.c_int64 * len(b.values))(*b.values)
            assert entry(ctypes.addressof(words)) != 0


@needs_ext
def test_c_and_python_calls_agree(ops, monkeypatch):
    op = ops["r"]
    args = _qk(7, 3)
    bound = op.bind(*args, threads=1)
    assert bound.c is not None
    monkeypatch.setenv(fastcall.ENV, "0")
    slow = op.bind(*args, threads=1)
    assert slow.c is None
    for seed in range(3):
        args = _qk(7, 10 + seed)
        assert [_bits(a) for a in bound(*args)] == [_bits(a) for a in slow(*args)]


@needs_ext
def test_refusals_match_the_python_path(ops, monkeypatch):
    """What the C checks decline, the Python path refuses with its message (or runs, when it may)."""
    op = ops["n"]
    x = np.ones((2, 256), np.float32)
    s = np.ones(256, np.float32)
    bound = op.bind(x, s, threads=1)
    assert bound.c is not None
    raw = np.zeros(2 * 256 * 4 + 8, np.uint8)
    misaligned = raw[2:2 + x.nbytes].view(np.float32).reshape(x.shape)   # 2 bytes off a float
    swapped = x.astype(">f4")
    cases = [(x.astype(np.float64), s), (x[:1], s), (swapped, s), (np.asfortranarray(np.ones((2, 256), np.float32)), s)]
    if not misaligned.flags.aligned:
        cases.append((misaligned, s))
    for args in cases:
        assert bound.c(*args) is None               # declined in C
        with pytest.raises(ValueError):
            bound(*args)
    # a subclass of ndarray is declined in C; the Python path takes it
    sub = x.view(type("Sub", (np.ndarray,), {}))
    assert bound.c(sub, s) is None
    np.testing.assert_array_equal(bound(sub, s), op.run(x, s, backend="c"))
    assert bound.c(x) is None and bound.c(x, s, s) is None   # another count of arrays


@needs_ext
def test_no_reference_leaked_or_lost(ops):
    op = ops["r"]
    q, k, pos, cos, sin = _qk(3, 4)
    bound = op.bind(q, k, pos, cos, sin, threads=1)
    bad = pos.copy()
    bad[0] = -1
    before = [sys.getrefcount(a) for a in (q, k, pos, bad, cos, sin)]
    for _ in range(200):
        out = bound.c(q, k, pos, cos, sin)
        assert sys.getrefcount(out) == 2 and all(sys.getrefcount(o) == 3 for o in out)   # tuple, o, argument
        with pytest.raises(ValueError, match="position"):
            bound.c(q, k, bad, cos, sin)
        assert bound.c(q.astype(np.float32), k, pos, cos, sin) is None
    del out
    assert [sys.getrefcount(a) for a in (q, k, pos, bad, cos, sin)] == before


@needs_ext
def test_caller_outputs_and_their_overlap(ops):
    """Bound with out=: the caller's outputs are returned and written; a new input over their bytes
    is declined in C (and refused by the Python path)."""
    op = ops["r"]
    q, k, pos, cos, sin = _qk(2, 5)
    flat = np.zeros(q.size + 512, BF16)
    qo, ko = flat[:q.size].reshape(q.shape), np.empty_like(k)
    bound = op.bind(q, k, pos, cos, sin, out=(qo, ko), threads=1)
    assert bound.c is not None
    want = op.run(q, k, pos, cos, sin, backend="c")
    got = bound.c(q, k, pos, cos, sin)
    assert got[0] is qo and got[1] is ko and [_bits(a) for a in got] == [_bits(a) for a in want]
    over = flat[64:64 + q.size].reshape(q.shape)
    over[...] = q
    assert bound.c(over, k, pos, cos, sin) is None
    with pytest.raises(ValueError):
        bound(over, k, pos, cos, sin)


@needs_ext
def test_large_outputs_start_on_a_line(ops):
    op = ops["r"]
    args = _qk(2048, 6)        # q_rot is 1 MiB: runtime/aligned.py's allocator
    bound = op.bind(*args, threads=1)
    assert bound.c is not None
    for _ in range(3):
        qo, ko = bound.c(*args)
        assert qo.ctypes.data % 64 == 0 and qo.flags.c_contiguous
    assert [_bits(a) for a in (qo, ko)] == [_bits(a) for a in op.run(*args, backend="c")]


@needs_ext
def test_more_outputs_than_the_stack_holds():
    """Nine outputs (the C call keeps eight on its stack, more on the heap)."""
    decls = "\n".join(f"    in q{i}: f32[tokens=T, heads=1, head_dim=8]" for i in range(9))
    outs = "\n".join(f"    out y{i} = rotate(q{i})" for i in range(9))
    op = ropegen.compile(f"rope many {{\n{decls}\n    in pos: i64[T]\n{outs}\n    pairing = neox\n"
                         f"    positions = pos\n    angles = computed(base = 10000)\n}}\n")["many"]
    rng = np.random.default_rng(7)
    arrays = [rng.standard_normal((3, 1, 8)).astype(np.float32) for _ in range(9)] + [np.arange(3)]
    bound = op.bind(*arrays, threads=1)
    assert bound.c is not None
    got = bound.c(*arrays)
    want = op.run(*arrays, backend="c")      # a first call of its signature: the HostCall path
    assert len(got) == 9 and all(_bits(g) == _bits(w) for g, w in zip(got, want))
    assert all(sys.getrefcount(g) == 3 for g in got)     # the tuple, g and getrefcount's argument


def test_unavailable_says_why(monkeypatch):
    monkeypatch.setenv(fastcall.ENV, "0")
    assert fastcall.module() is None and fastcall.unavailable() == f"{fastcall.ENV}=0"


def test_python_h_is_where_sysconfig_says(monkeypatch):
    """fastcall finds Python.h without sysconfig where the interpreter's base prefix holds it, in the very
    folder sysconfig names; elsewhere it asks sysconfig."""
    import sysconfig
    said = sysconfig.get_paths().get("include") or ""
    found = fastcall._include()
    assert found == said or not (Path(said) / "Python.h").is_file()
    monkeypatch.setattr(sys, "base_prefix", "/nonexistent-prefix")
    assert fastcall._include() == said


FIRST_BOUND_CALL = """
import sys
import numpy as np
import ropegen
from ropegen.backends.c import fastcall
op = ropegen.compile(sys.argv[1])["n"]
x, s = np.ones((2, 256), np.float32), np.ones(256, np.float32)
op.run(x, s, backend="c", threads=1)
op.run(x, s, backend="c", threads=1)     # a signature seen twice: bound, through the extension
assert fastcall.module() is not None
print(sorted(m for m in sys.modules if m.startswith("_sysconfigdata")))
"""


@needs_ext
def test_first_bound_call_loads_no_build_configuration(tmp_path):
    """Loading the extension in a new process reads no sysconfig data module (it cost 1.5 ms of the
    process's second call; the Python.h it needs is found by its path)."""
    spec = tmp_path / "ops.rope"
    spec.write_text(ROPE, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    r = subprocess.run([sys.executable, "-c", FIRST_BOUND_CALL, str(spec)], env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


@needs_ext
def test_a_call_object_is_initialized_once(ops):
    bound = ops["n"].bind(np.ones((1, 256), np.float32), np.ones(256, np.float32), threads=1)
    with pytest.raises(TypeError, match="once"):
        bound.c.__init__(1, [], [], [], None, [], False, print, [], [])
    fresh = type(bound.c).__new__(type(bound.c))       # never initialized: declines every call
    assert fresh() is None and fresh(1, 2) is None


@needs_ext
def test_in_place(ops):
    """In place: the sources come back written; a read-only source, or an input over another source's
    bytes, is declined in C and refused by the Python path."""
    op = ops["r"]
    q, k, pos, cos, sin = _qk(3, 8)
    want = op.run(q, k, pos, cos, sin, backend="c")
    bound = op.bind(q.copy(), k.copy(), pos, cos, sin, inplace=True, threads=1)
    assert bound.c is not None
    q2, k2 = q.copy(), k.copy()
    before = [sys.getrefcount(a) for a in (q2, k2)]
    got = bound.c(q2, k2, pos, cos, sin)
    assert got[0] is q2 and got[1] is k2 and [_bits(a) for a in got] == [_bits(a) for a in want]
    del got
    assert [sys.getrefcount(a) for a in (q2, k2)] == before
    frozen = q.copy()
    frozen.flags.writeable = False
    assert bound.c(frozen, k.copy(), pos, cos, sin) is None
    with pytest.raises(ValueError):
        bound(frozen, k.copy(), pos, cos, sin)
    flat = np.zeros(q.size, BF16)             # k inside q's bytes: q_rot would be written over k
    q_over, k_over = flat.reshape(q.shape), flat[256:256 + k.size].reshape(k.shape)
    assert bound.c(q_over, k_over, pos, cos, sin) is None
    with pytest.raises(ValueError):
        bound(q_over, k_over, pos, cos, sin)
    table = np.zeros((ROWS, 32), np.float32)  # a table read while q is written over: q inside it
    inside = table.view(BF16).reshape(-1)[:q.size].reshape(q.shape)
    assert bound.c(inside, k.copy(), pos, table, sin) is None


@needs_ext
def test_malformed_bindings_are_errors_not_crashes(ops):
    """The constructor checks what it is handed (fastcall.call_for is its one caller): a word index,
    a source or a rank out of range is an exception, never a write outside the call's words."""
    bound = ops["n"].bind(np.ones((1, 256), np.float32), np.ones(256, np.float32), threads=1)
    Call = type(bound.c)
    f32 = np.dtype(np.float32)
    good_in = (f32, (1, 256), (1024, 4), 3, (0,), 0, -1)
    cases = [
        ((1, [0], [(f32, (1, 256), (1024, 4), 3, (5,), 0, -1)], [], None, [], False, print, [], [], []), ValueError),
        ((1, [0], [(f32, (1, 256), (4,), 3, (0,), 0, -1)], [], None, [], False, print, [], [], []), ValueError),
        ((1, [0, 0], [good_in], [(f32, (1, 256), None, (2,))], None, [], False, print, [], [], []), ValueError),
        ((1, [0, 0], [good_in], [], None, [], False, print, [(3, (1,))], [], []), ValueError),
        ((1, [0, 0], [good_in], [], None, [], False, print, [(0, (1,))], [(1, 0, 3)], []), ValueError),
        ((0, [0], [good_in], [], None, [], False, print, [], [], []), ValueError),
        ((1, [0], [("f4", (1,), (4,), 3, (0,), 0, -1)], [], None, [], False, print, [], [], []), TypeError),
        ((1, [0], [good_in], [], None, [], False, "not callable", [], [], []), TypeError),
        # given outputs (out= passed anew): a word index out of range, in place beside them, both ways
        ((1, [0], [good_in], [], None, [], False, print, [], [], [(f32, (1, 256), (1024, 4), 3, (7,), 0, -1)]),
         ValueError),
        ((1, [0, 0], [good_in], [], None, [], False, print, [(0, (1,))], [], [good_in]), ValueError),
        ((1, [0, 0], [good_in], [(f32, (1, 256), None, (1,))], None, [], False, print, [], [], [good_in]), ValueError),
    ]
    for args, error in cases:
        with pytest.raises(error):
            Call(*args)


@needs_ext
def test_outputs_passed_anew(ops):
    """A call bound with out= takes new outputs after its inputs, in C: the same bits as the Python
    path, the outputs returned (no reference lost); an output of another signature, read-only,
    misaligned, or sharing a byte with another output or any input, is declined, and the Python path
    refuses it (or, an output exactly over its source, runs it)."""
    op = ops["r"]
    q, k, pos, cos, sin = _qk(3, 12)
    want = op.run(q, k, pos, cos, sin, backend="c")
    bound = op.bind(q, k, pos, cos, sin, threads=1, out=(np.empty_like(q), np.empty_like(k)))
    assert bound.c is not None
    qo, ko = np.empty_like(q), np.empty_like(k)
    before = [sys.getrefcount(a) for a in (qo, ko)]
    got = bound.c(q, k, pos, cos, sin, qo, ko)
    assert got[0] is qo and got[1] is ko and [_bits(a) for a in got] == [_bits(a) for a in want]
    del got
    assert [sys.getrefcount(a) for a in (qo, ko)] == before
    frozen = np.empty_like(q)
    frozen.flags.writeable = False
    flat = np.zeros(q.size + k.size, BF16)
    table = np.zeros((ROWS, 32), np.float32)
    declined = {
        "another dtype": (q.astype(np.float32), ko),
        "another shape": (q[:2], ko),
        "another strides": (np.empty((3, 4, 128), BF16)[:, :, :64], ko),
        "read-only": (frozen, ko),
        "misaligned": (np.zeros(q.nbytes + 1, np.uint8)[1:].view(BF16).reshape(q.shape), ko),
        "over each other": (flat[:q.size].reshape(q.shape), flat[q.size - 64:q.size - 64 + k.size].reshape(k.shape)),
        "over an input": (table.view(BF16).reshape(-1)[:q.size].reshape(q.shape), ko),
        "over its source": (q, ko),
    }
    for what, outs in declined.items():
        args = (q, k, pos, table if what == "over an input" else cos, sin)
        assert bound.c(*args, *outs) is None, what
        if what == "over its source":
            continue
        with pytest.raises(ValueError):
            bound(*args, out=outs)
    # exactly over its source: declined in C, run in place by the Python path
    q2 = q.copy()
    got = bound(q2, k, pos, cos, sin, out=(q2, ko))
    assert got[0] is q2 and _bits(q2) == _bits(want[0])
    # a call passing no outputs still runs on the bound ones; a Call holding none declines it
    assert [_bits(a) for a in bound.c(q, k, pos, cos, sin)] == [_bits(a) for a in want]
    assert bound.forget().c(q, k, pos, cos, sin) is None
