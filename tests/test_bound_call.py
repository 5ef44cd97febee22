"""Operator.bind: a call validated once. Same bits as op.run, the signature re-checked cheaply on new
arrays (a changed shape, dtype, strides, alignment or an overlapping output is a ValueError), in place
and out=, and positions still checked by the kernel on every call. No timing here (CI never depends
on it)."""
from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import ropegen
from ropegen.backends.c import fastcall
from ropegen.backends.c.backend import CBackend

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
BF16 = ml_dtypes.bfloat16

pytestmark = pytest.mark.skipif(CBackend().unavailable() is not None, reason=str(CBackend().unavailable()))

RMSNORM = """
rmsnorm rms4096 {
    in x:     f32[N, 4096]
    in scale: f32[4096]
    out y
}
"""


@pytest.fixture(scope="module", params=["c", "python"], autouse=True)
def way(request):
    """Every test twice: the bound calls' per-call part in C (backends/c/fastcall.py) and in Python."""
    if request.param == "c" and fastcall.unavailable():
        pytest.skip(f"bound calls in C unavailable: {fastcall.unavailable()}")
    with pytest.MonkeyPatch.context() as mp:
        if request.param == "python":
            mp.setenv(fastcall.ENV, "0")
        yield request.param


@pytest.fixture(scope="module")
def llama(way):
    return ropegen.compile(EXAMPLES / "llama3.rope")


def _qk(tokens: int, seed: int):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((tokens, 32, 128)).astype(BF16), rng.standard_normal((tokens, 8, 128)).astype(BF16))


def _tables(rows: int = 64):
    rng = np.random.default_rng(9)
    return rng.uniform(-1, 1, (rows, 64)).astype(np.float32), rng.uniform(-1, 1, (rows, 64)).astype(np.float32)


def _same(got, want) -> bool:
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    return len(got) == len(want) and all(
        g.shape == w.shape and g.dtype == w.dtype and np.array_equal(g.view(np.uint8), w.view(np.uint8))
        for g, w in zip(got, want))


@pytest.mark.parametrize("threads", [1, 2, None])
@pytest.mark.parametrize("tokens", [1, 16])
def test_same_bits_as_run(llama, way, tokens, threads):
    op = llama["llama3_8b"]
    q, k = _qk(tokens, 1)
    pos = np.arange(40, 40 + tokens, dtype=np.int64)
    bound = op.bind(q, k, pos, threads=threads)
    assert (bound.c is not None) == (way == "c")    # the way this run tests is the one taken
    assert _same(bound(), op.run(q, k, pos, backend="c", threads=threads))
    first = bound()
    assert first[0] is not bound()[0]             # new outputs every call unless out= was bound
    q2, k2 = _qk(tokens, 2)
    pos2 = np.arange(7, 7 + tokens, dtype=np.int64)
    assert _same(bound(q2, k2, pos2), op.run(q2, k2, pos2, backend="c", threads=threads))
    # the bound arrays' contents are read at each call, not at bind time
    q[...] = q2
    k[...] = k2
    pos[...] = pos2
    assert _same(bound(), op.run(q2, k2, pos2, backend="c"))


def test_rmsnorm_out_and_bare_output():
    op = ropegen.compile(RMSNORM)["rms4096"]
    rng = np.random.default_rng(3)
    x, s = rng.standard_normal((1, 4096)).astype(np.float32), rng.standard_normal(4096).astype(np.float32)
    want = op.run(x, s, backend="c")
    assert _same(op.bind(x, s)(), want)
    y = np.empty_like(x)
    bound = op.bind(x, s, threads=1, out=y)
    assert bound() is y and _same(y, want)
    x2 = rng.standard_normal((1, 4096)).astype(np.float32)
    assert bound(x2, s) is y and _same(y, op.run(x2, s, backend="c"))
    y2 = np.empty_like(x)
    assert bound(x, s, out=y2) is y2 and _same(y2, want)
    # numpy backend: the generic bound call, same answer
    assert np.allclose(op.bind(x, s, backend="numpy")(x2, s), op.run(x2, s, backend="numpy"))


def test_out_and_in_place(llama):
    op = llama["llama3_8b_cached"]
    cos, sin = _tables()
    q, k = _qk(4, 4)
    pos = np.array([0, 5, 63, 2], dtype=np.int64)
    want = op.run(q, k, pos, cos, sin, backend="c")
    qo, ko = np.empty_like(q), np.empty_like(k)
    bound = op.bind(q, k, pos, cos, sin, out=(qo, ko))
    got = bound()
    assert got[0] is qo and got[1] is ko and _same(got, want)
    # in place: bound over copies, then over new arrays of the same signature
    qc, kc = q.copy(), k.copy()
    inplace = op.bind(qc, kc, pos, cos, sin, inplace=True)
    got = inplace()
    assert got[0] is qc and got[1] is kc and _same(got, want)
    q2, k2 = _qk(4, 5)
    want2 = op.run(q2, k2, pos, cos, sin, backend="c")
    got = inplace(q2, k2, pos, cos, sin)
    assert got[0] is q2 and _same(got, want2)


def test_signature_changes_are_refused(llama):
    op = llama["llama3_8b"]
    q, k = _qk(2, 6)
    pos = np.array([3, 4], dtype=np.int64)
    bound = op.bind(q, k, pos, threads=1)
    big_q, _ = _qk(4, 7)
    cases = {
        "shape": (q[:1], k, pos[:1]),
        "dtype": (q.astype(np.float32), k, pos),
        "positions dtype": (q, k, pos.astype(np.int32)),
        "strides": (big_q[::2], k, pos),
        "count": (q, k),
    }
    buf = np.zeros(q.nbytes + 2, np.uint8)
    odd = np.frombuffer(buf.data, dtype=BF16, count=q.size, offset=1).reshape(q.shape)
    assert not odd.flags.aligned and odd.strides == q.strides
    cases["misaligned"] = (odd, k, pos)
    for what, args in cases.items():
        with pytest.raises(ValueError):
            bound(*args)
        assert what   # each case raised
    assert _same(bound(), op.run(q, k, pos, backend="c"))   # still usable after refusals
    # out= only where out= was bound
    with pytest.raises(ValueError, match="bind again"):
        bound(q, k, pos, out=(np.empty_like(q), np.empty_like(k)))


def test_overlapping_outputs_are_refused(llama):
    op = llama["llama3_8b"]
    q, k = _qk(1, 8)
    pos = np.array([9], dtype=np.int64)
    flat = np.zeros(q.size + 256, BF16)
    qo = flat[:q.size].reshape(q.shape)
    ko = np.empty_like(k)
    bound = op.bind(q, k, pos, out=(qo, ko))
    want = op.run(q, k, pos, backend="c")
    assert _same(bound(), want)
    shifted = flat[128:128 + q.size].reshape(q.shape)     # a new q that overlaps q_rot's bytes
    shifted[...] = q
    with pytest.raises(ValueError):
        bound(shifted, k, pos)
    # new outputs that overlap each other
    ko_in_qo = flat[:k.size].reshape(k.shape)
    with pytest.raises(ValueError):
        bound(q, k, pos, out=(qo, ko_in_qo))
    # an input next to (not over) the outputs is fine
    assert _same(bound(q.copy(), k.copy(), pos), want)


def test_positions_still_checked(llama):
    op = llama["llama3_8b_cached"]
    cos, sin = _tables(64)
    q, k = _qk(2, 10)
    pos = np.array([1, 2], dtype=np.int64)
    bound = op.bind(q, k, pos, cos, sin, threads=1)
    bound()
    for bad in (64, -1, 1 << 40):
        with pytest.raises(ValueError):
            bound(q, k, np.array([1, bad], dtype=np.int64), cos, sin)
        pos[1] = bad                 # the bound array changed after bind: the kernel still checks
        with pytest.raises(ValueError):
            bound()
        pos[1] = 2
    qo, ko = np.empty_like(q), np.empty_like(k)
    given = op.bind(q, k, pos, cos, sin, out=(qo, ko))
    with pytest.raises(ValueError):
        given(q, k, np.array([0, 64], dtype=np.int64), cos, sin)


def test_layouts_bind_copies_for_still_work(llama):
    """A layout the kernel cannot read in place (head_dim not contiguous) is bound too; its calls go
    the whole way, with the same answer."""
    op = llama["llama3_8b"]
    q, k = _qk(2, 11)
    pos = np.array([0, 1], dtype=np.int64)
    q2 = np.repeat(q, 2, axis=2)[:, :, ::2]
    bound = op.bind(q2, k, pos)
    want = op.run(q, k, pos, backend="c")
    assert _same(bound(), want)
    assert _same(bound(np.repeat(q, 2, axis=2)[:, :, ::2], k, pos), want)
    with pytest.raises(ValueError):
        bound(q, k, pos)             # contiguous is another signature


def test_run_in_a_loop_keeps_every_check(llama):
    """op.run binds a signature it sees twice in a row (CKernel.__call__): later calls of that
    signature, other signatures, in place, and the refusals all behave as on the first call."""
    op = llama["llama3_8b_cached"]
    cos, sin = _tables(64)
    ref = ropegen.compile(EXAMPLES / "llama3.rope")["llama3_8b_cached"]    # a fresh kernel cache

    def fresh(*args, **options):
        return ref.kernel("c")._bind(args, options.get("threads"), None, options.get("inplace", False))

    for step in range(4):
        q, k = _qk(2, 20 + step)
        pos = np.array([step, 63 - step], dtype=np.int64)
        want = ref.run(q.copy(), k.copy(), pos, cos, sin, backend="c")
        assert fresh(q, k, pos, cos, sin) is not None
        assert _same(op.run(q, k, pos, cos, sin, backend="c", threads=1), want)
        got = op.run(q, k, pos, cos, sin, backend="c", threads=1, inplace=True)
        assert got[0] is q and _same(got, want)
        q3, k3 = _qk(3, step)      # another signature between: still right
        assert _same(op.run(q3, k3, np.arange(3), cos, sin, backend="c", threads=1),
                     ref.run(q3, k3, np.arange(3), cos, sin, backend="c"))
    with pytest.raises(ValueError):
        op.run(q, k, np.array([0, 64], dtype=np.int64), cos, sin, backend="c", threads=1)
    # in place with k inside q's bytes, in the layout the loop above bound: refused
    flat = np.zeros(q.size, BF16)
    q_over = flat.reshape(q.shape)
    k_over = flat[1024:1024 + k.size].reshape(k.shape)
    assert q_over.strides == q.strides and k_over.strides == k.strides
    for _ in range(3):
        with pytest.raises(ValueError):
            op.run(q_over, k_over, pos, cos, sin, backend="c", threads=1, inplace=True)
    bound = op.bind(q, k, pos, cos, sin, threads=1, inplace=True)
    with pytest.raises(ValueError):
        bound(q_over, k_over, pos, cos, sin)
    for _ in range(3):
        with pytest.raises(ValueError):
            op.run(q, k, pos.astype(np.int32), cos, sin, backend="c", threads=1)


def test_op_run_binds_a_repeated_signature_once_even_with_a_scalar_input(monkeypatch):
    """A bound call whose quick path declines (a rank-0 input) must not be rebuilt on every op.run."""
    from ropegen.backends.c import call as c_call
    op = ropegen.compile("""
rope r { in q: f32[batch=1, seq=1, heads=4, head_dim=64] in st: i64[]
 out y = rotate(q) pairing = neox positions = arange(start = st) angles = computed(base = 10000) }""")["r"]
    q, st = np.ones((1, 1, 4, 64), np.float32), np.array(5)
    made = []
    real = c_call.BoundCall.__init__

    def counting(self, *args, **kwargs):
        made.append(1)
        real(self, *args, **kwargs)
    monkeypatch.setattr(c_call.BoundCall, "__init__", counting)
    want = op.run(q, st, backend="c", threads=1)
    for _ in range(20):
        np.testing.assert_array_equal(op.run(q, st, backend="c", threads=1), want)
    assert len(made) == 1


def test_out_over_its_own_sources_is_bound_as_in_place(llama):
    """out= the very sources (in place, which bind allows) is bound for the quick per-call part, not
    the whole way every call; same bits as inplace=True, and a new input over the bound outputs
    (other than being them) is still refused."""
    op = llama["llama3_8b"]
    q, k = _qk(2, 12)
    pos = np.array([5, 6], dtype=np.int64)
    want = op.run(q.copy(), k.copy(), pos, backend="c", inplace=True)
    q2, k2 = q.copy(), k.copy()
    bound = op.bind(q2, k2, pos, out=(q2, k2))
    assert not bound.slow
    got = bound()
    assert got[0] is q2 and got[1] is k2 and _same(got, want)
    # the same through op.run's out=
    q3, k3 = q.copy(), k.copy()
    assert _same(op.run(q3, k3, pos, backend="c", out=(q3, k3)), want)
    # q in place, k to an array of its own
    q4, k4, ko = q.copy(), k.copy(), np.empty_like(k)
    part = op.bind(q4, k4, pos, out=(q4, ko))
    assert not part.slow
    assert _same(part(), want) and _same(k4, k)
    flat = np.zeros(q.size + 1, BF16)
    over = flat[:q.size].reshape(q.shape)
    over[...] = q
    with pytest.raises(ValueError, match="exactly"):
        op.bind(over, k.copy(), pos, out=(flat[1:].reshape(q.shape), np.empty_like(k)))


def test_run_with_out_in_a_loop(llama):
    """op.run(..., out=) of one signature in a loop binds it, the outputs passed anew with each call
    (in C where it can be): the same bits as without out=, into the arrays given; an out= over an
    input is still refused on that way."""
    op = llama["llama3_8b"]
    pos = np.array([3, 4], dtype=np.int64)
    bufs = [(np.empty((2, 32, 128), BF16), np.empty((2, 8, 128), BF16)) for _ in range(2)]
    for i in range(5):
        q, k = _qk(2, 20 + i)
        want = op.run(q, k, pos, backend="c", threads=1)
        got = op.run(q, k, pos, backend="c", threads=1, out=bufs[i % 2])
        assert got[0] is bufs[i % 2][0] and got[1] is bufs[i % 2][1] and _same(got, want)
    assert (1, "out") in op.kernel("c")._last
    q, k = _qk(2, 30)
    with pytest.raises(ValueError, match="still to be read"):
        op.run(q, k, pos, backend="c", threads=1, out=(bufs[0][0], q.reshape(-1)[:k.size].reshape(k.shape)))
    with pytest.raises(ValueError):
        op.run(q, k, pos, backend="c", threads=1, out=(bufs[0][0].astype(np.float32), bufs[0][1]))
    assert _same(op.run(q, k, pos, backend="c", threads=1, out=bufs[1]), op.run(q, k, pos, backend="c", threads=1))
