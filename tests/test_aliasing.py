"""Aliasing: outputs that share memory with other outputs or with inputs still to be read are a
ValueError in every backend that takes caller memory for its outputs (C: out= and inplace=True;
CUDA: inplace=True), decided exactly from address, shape and byte strides; legal sharing (exact in
place, read-only inputs from one buffer, interleaved views that never touch) still runs correctly.
"""
from __future__ import annotations

import itertools
import sys
import types
from pathlib import Path

import numpy as np
import pytest

import ropegen
from ropegen.runtime import aliasing
from ropegen.runtime.aliasing import Extent, check, internal_overlap, overlap
from ropegen.backends.cuda import backend as cuda_backend
from ropegen.backends.c.backend import CBackend

ROOT = Path(__file__).resolve().parent.parent

# q and k of the same shape, so that one array can be passed as both
PAIR = """
rope pair {
    in q:         f32[tokens=T, heads=2, head_dim=8]
    in k:         f32[tokens=T, heads=2, head_dim=8]
    in positions: i64[T]
    out q_rot = rotate(q)
    out k_rot = rotate(k)
    pairing   = neox
    positions = positions
    angles    = computed(base = 10000)
}
"""

needs_c = pytest.mark.skipif(CBackend().unavailable() is not None, reason=str(CBackend().unavailable()))


@pytest.fixture(scope="module")
def pair():
    return ropegen.compile(PAIR)["pair"]


def _rng_qk(tokens=5, seed=0):
    return np.random.default_rng(seed).standard_normal((tokens, 2, 8)).astype(np.float32)


def _reference(op, q, k, pos):
    return op.run_all(np.array(q, copy=True), np.array(k, copy=True), pos, backend="numpy")


# ---------------------------------------------------------------------------------------------
# the extent test itself

def test_overlap_is_exact_against_numpy_on_random_strided_views():
    rng = np.random.default_rng(7)
    buf = np.zeros(8192, np.uint8)

    def view():
        size = int(rng.choice([1, 2, 4, 8]))
        base = buf[int(rng.integers(0, 64)):].view(np.uint8)
        shape = tuple(int(rng.integers(0, 6)) for _ in range(int(rng.integers(1, 4))))
        # element-multiple strides mostly, odd byte strides sometimes; either sign
        strides = tuple(int(rng.integers(-40, 41)) * (size if rng.random() < 0.7 else 1) for _ in shape)
        a = np.lib.stride_tricks.as_strided(base[4096:], shape=shape + (size,), strides=strides + (1,))
        return a.view(f"u{size}")[..., 0] if size > 1 else a[..., 0]

    decided = {True: 0, False: 0}
    for _ in range(4000):
        a, b = view(), view()
        want = bool(np.shares_memory(a, b, max_work=None))
        got = overlap(Extent.of(a), Extent.of(b))
        assert got is want, (a.shape, a.strides, b.shape, b.strides)
        decided[want] += 1
    assert min(decided.values()) > 500      # both answers well exercised


def test_overlap_of_raw_pointer_extents():
    p, f4 = 0x7F12_0000_0000, 4             # a device address: nothing is ever read through it
    row = 48 * 128 * 2
    q = Extent(p, (4096, 32, 128), (row, 256, 2), 2)                 # one fused bf16 QKV buffer
    k = Extent(p + 32 * 256, (4096, 8, 128), (row, 256, 2), 2)
    assert overlap(q, k) is False and overlap(k, q) is False
    assert overlap(q, Extent(p + 31 * 256, (4096, 2, 128), (row, 256, 2), 2)) is True
    x = (p, (64, 32), (128, 4))
    even, odd = Extent(x[0], (64, 16), (128, 8), f4), Extent(x[0] + 4, (64, 16), (128, 8), f4)
    assert overlap(even, odd) is False
    assert overlap(even, Extent(x[0] + 2, (64, 16), (128, 8), f4)) is True           # half an element
    assert overlap(Extent(*x, f4), Extent(x[0] + 4, (64, 32), (128, 4), f4)) is True   # shifted by one
    backwards = Extent(p + 63 * 128, (64, 32), (-128, 4), f4)                    # the rows reversed
    assert overlap(backwards, Extent(*x, f4)) is True and backwards.bounds() == Extent(*x, f4).bounds()
    assert overlap(Extent(p, (0, 32), (128, 4), f4), Extent(*x, f4)) is False   # empty: never
    assert overlap(Extent(p, (64, 32), (0, 0), f4), Extent(p + 4, (1,), (4,), f4)) is False  # broadcast


def test_internal_overlap_is_exact_against_enumerating_every_byte():
    rng = np.random.default_rng(5)

    def brute(shape, strides, itemsize):
        seen = set()
        for idx in itertools.product(*map(range, shape)):
            start = sum(i * s for i, s in zip(idx, strides))
            for byte in range(start, start + itemsize):
                if byte in seen:
                    return True
                seen.add(byte)
        return False

    decided = {True: 0, False: 0}
    for _ in range(3000):
        shape = tuple(int(rng.integers(0, 6)) for _ in range(int(rng.integers(1, 4))))
        strides = tuple(int(rng.integers(-30, 31)) for _ in shape)
        size = int(rng.choice([1, 2, 4, 8]))
        want = brute(shape, strides, size)
        assert internal_overlap(Extent(0x7F00_0000_0000, shape, strides, size)) is want, (shape, strides, size)
        decided[want] += 1
    assert min(decided.values()) > 500


def test_undecided_within_the_budget_counts_as_overlap(monkeypatch):
    a = Extent(0x1000, (1000, 1000), (9973, 10007), 1)
    b = Extent(0x1000 + 5, (1000, 1000), (10009, 9967), 1)
    assert overlap(a, b, max_work=3) is None
    monkeypatch.setattr(aliasing, "MAX_WORK", 3)
    with pytest.raises(ValueError, match="may overlap"):
        check({}, {"a": a, "b": b}, {})


def test_check_rules_on_extents():
    p = 0x7F00_0000_0000
    q = Extent(p, (4, 8), (32, 4), 4)
    table = Extent(p + 4096, (16, 4), (16, 4), 4)
    check({"q": q, "cos": table, "sin": table}, {"q_rot": q}, {"q_rot": "q"})   # in place, shared tables
    check({"q": q, "k": q}, {"q_rot": Extent(p + 8192, (4, 8), (32, 4), 4)}, {"q_rot": "q"})
    with pytest.raises(ValueError, match="q overlaps cos in memory, which is still to be read"):
        check({"q": q, "cos": q}, {"q_rot": q}, {"q_rot": "q"})
    with pytest.raises(ValueError, match="q and k overlap"):
        check({"q": q, "k": q}, {"q_rot": q, "k_rot": q}, {"q_rot": "q", "k_rot": "k"})
    with pytest.raises(ValueError, match="out q_rot overlaps cos"):
        check({"q": q, "cos": Extent(p + 8192 + 64, (8,), (4,), 4)},
              {"q_rot": Extent(p + 8192, (4, 8), (32, 4), 4)}, {"q_rot": "q"})
    with pytest.raises(ValueError, match="its source q"):
        check({"q": q}, {"q_rot": Extent(p + 4, (4, 8), (32, 4), 4)}, {"q_rot": "q"})
    with pytest.raises(ValueError, match="a is written in place over q, which b still reads"):
        check({"q": q}, {"a": q, "b": Extent(p + 4096, (4, 8), (32, 4), 4)}, {"a": "q", "b": "q"})


# ---------------------------------------------------------------------------------------------
# the C backend: out= and inplace=True

@needs_c
def test_c_same_array_as_q_and_k_in_place_is_rejected_not_rotated_twice(pair):
    x = _rng_qk()
    before = x.copy()
    with pytest.raises(ValueError, match="q and k overlap in memory"):
        pair.run(x, x, np.arange(5), backend="c", inplace=True)
    assert np.array_equal(x, before)        # refused before anything was written
    # read only, the same array as q and k is fine
    got = pair.run_all(x, x, np.arange(5), backend="c")
    want = _reference(pair, x, x, np.arange(5))
    assert all(np.allclose(g, w, atol=1e-6) for g, w in zip(got, want))


@needs_c
def test_c_out_overlapping_an_input_still_to_be_read_is_rejected(pair):
    q, k, pos = _rng_qk(seed=1), _rng_qk(seed=2), np.arange(5)
    with pytest.raises(ValueError, match="out q_rot overlaps k in memory, which is still to be read"):
        pair.run(q, k, pos, backend="c", out=(k, np.empty_like(k)))
    buf = np.zeros(5 * 2 * 8, dtype=np.float32)
    inside = buf.view(np.int64)[:5]         # positions live inside the memory out k_rot names
    with pytest.raises(ValueError, match="out k_rot overlaps positions"):
        pair.run(q, k, inside, backend="c", out=(np.empty_like(q), buf.reshape(5, 2, 8)))
    big = np.empty((5, 4, 8), np.float32)
    with pytest.raises(ValueError, match="out q_rot and out k_rot overlap"):
        pair.run(q, k, pos, backend="c", out=(big[:, :2], big[:, 1:3]))


@needs_c
def test_c_self_overlapping_outputs_are_rejected(pair):
    q, k, pos = _rng_qk(seed=13), _rng_qk(seed=14), np.arange(5)
    row = np.zeros((2, 8), np.float32)
    every_token = np.lib.stride_tricks.as_strided(row, (5, 2, 8), (0, 32, 4))     # writeable, stride 0
    with pytest.raises(ValueError, match="out q_rot: its elements overlap each other"):
        pair.run(q, k, pos, backend="c", out=(every_token, np.empty_like(k)))
    flat = np.random.default_rng(15).standard_normal(64).astype(np.float32)
    windows = np.lib.stride_tricks.as_strided(flat, (5, 2, 8), (16, 32, 4))      # tokens 4 floats apart
    with pytest.raises(ValueError, match="k: its elements overlap each other"):
        pair.run(q, windows, pos, backend="c", inplace=True)


@needs_c
def test_c_partially_overlapping_views_are_rejected(pair):
    pos = np.arange(5)
    x = np.random.default_rng(3).standard_normal((5, 3, 8)).astype(np.float32)
    with pytest.raises(ValueError, match="q and k overlap"):       # heads 0-1 and 1-2
        pair.run(x[:, 0:2], x[:, 1:3], pos, backend="c", inplace=True)
    flat = np.random.default_rng(4).standard_normal(5 * 2 * 8 + 1).astype(np.float32)
    q, shifted = flat[1:].reshape(5, 2, 8), flat[:-1].reshape(5, 2, 8)    # one element apart
    k = _rng_qk(seed=5)
    with pytest.raises(ValueError, match="out q_rot overlaps its source q in memory without being exactly q"):
        pair.run(q, k, pos, backend="c", out=(shifted, np.empty_like(k)))
    t = np.random.default_rng(6).standard_normal((6, 2, 8)).astype(np.float32)
    with pytest.raises(ValueError, match="its source q"):                 # one token apart
        pair.run(t[1:], k, pos, backend="c", out=(t[:-1], np.empty_like(k)))


@needs_c
def test_c_interleaved_views_that_never_touch_run_correctly(pair):
    pos = np.array([0, 3, 9, 1, 4])
    x = np.random.default_rng(8).standard_normal((5, 4, 8)).astype(np.float32)
    q, k = x[:, ::2], x[:, 1::2]            # heads 0, 2 and 1, 3: interleaved, disjoint
    want = _reference(pair, q, k, pos)
    out = np.full((5, 4, 8), np.nan, np.float32)
    got = pair.run_all(q, k, pos, backend="c", out=(out[:, ::2], out[:, 1::2]))
    assert all(np.allclose(g, w, atol=1e-6) for g, w in zip(got, want))
    assert np.allclose(out[:, ::2], want[0], atol=1e-6) and np.allclose(out[:, 1::2], want[1], atol=1e-6)
    got = pair.run_all(q, k, pos, backend="c", inplace=True)
    assert got[0].base is x and got[1].base is x
    assert np.allclose(x[:, ::2], want[0], atol=1e-6) and np.allclose(x[:, 1::2], want[1], atol=1e-6)


@needs_c
def test_c_fused_qkv_in_place_and_tables_from_one_buffer_run_correctly():
    prog = ropegen.compile(ROOT / "examples" / "llama3.rope")
    op, cached = prog["llama3_8b"], prog["llama3_8b_cached"]
    rng = np.random.default_rng(9)
    bf16 = op.plan.storage.np_dtype
    qkv = rng.standard_normal((3, 48, 128)).astype(bf16)
    pos = np.array([5, 0, 77])
    want = op.run_all(qkv[:, :32].copy(), qkv[:, 32:40].copy(), pos, backend="c")
    v = qkv[:, 40:].copy()
    q, k = op.run_all(qkv[:, :32], qkv[:, 32:40], pos, backend="c", inplace=True)
    assert q.base is qkv and k.base is qkv
    for got, w in zip((qkv[:, :32], qkv[:, 32:40]), want):
        assert np.array_equal(got.view(np.uint16), w.view(np.uint16))
    assert np.array_equal(qkv[:, 40:].view(np.uint16), v.view(np.uint16))     # v untouched
    # cos and sin as the same read-only table, q and k read from overlapping heads of one buffer
    table = rng.uniform(-1, 1, (100, 64)).astype(np.float32)
    x = rng.standard_normal((3, 33, 128)).astype(bf16)
    got = cached.run_all(x[:, :32], x[:, 25:33], pos, table, table, backend="c")
    ref = cached.run_all(x[:, :32].copy(), x[:, 25:33].copy(), pos, table, table.copy(), backend="c")
    for g, w in zip(got, ref):
        assert np.array_equal(g.view(np.uint16), w.view(np.uint16))


@needs_c
def test_c_in_place_exactly_over_the_source_stays_legal(pair):
    q, k, pos = _rng_qk(seed=10), _rng_qk(seed=11), np.arange(5)
    want = _reference(pair, q, k, pos)
    got = pair.run_all(q, k, pos, backend="c", out=(q, k))      # out= naming the sources themselves
    assert got[0] is q and got[1] is k
    assert all(np.allclose(g, w, atol=1e-6) for g, w in zip(got, want))


@needs_c
def test_c_rmsnorm_out_may_be_x_itself_but_not_overlap_it():
    """y over exactly x is vLLM's in-place rmsnorm (their types agree); any other overlap is refused."""
    op = ropegen.compile(ROOT / "examples" / "onnx_rmsnorm.rope")["rms_axis1"]
    x = np.random.default_rng(12).standard_normal((2, 3, 4, 5)).astype(np.float32)
    scale = np.random.default_rng(13).standard_normal((3, 4, 5)).astype(np.float32)
    want = op.run(x, scale, backend="c")
    same = x.copy()
    op.run(same, scale, backend="c", out=(same,))
    np.testing.assert_array_equal(same, want)
    buf = np.zeros(x.size + 1, np.float32)
    xs = buf[:x.size].reshape(x.shape)
    xs[...] = x
    with pytest.raises(ValueError, match="out y overlaps its source x in memory without being exactly x"):
        op.run(xs, scale, backend="c", out=(buf[1:].reshape(x.shape),))
    y = np.empty((2, 3, 4, 5), np.float32)
    with pytest.raises(ValueError, match="out y overlaps scale"):
        op.run(x, y[1], backend="c", out=(y,))


# ---------------------------------------------------------------------------------------------
# the CUDA wrapper, in place, on a host stand-in for CuPy that records launches instead of running

class _DevArray:
    """What the wrapper reads of a cupy.ndarray, over NumPy memory."""

    device = types.SimpleNamespace(id=0)

    def __init__(self, a):
        self.a = a

    data = property(lambda self: types.SimpleNamespace(ptr=self.a.ctypes.data))
    dtype = property(lambda self: self.a.dtype)
    shape = property(lambda self: self.a.shape)
    strides = property(lambda self: self.a.strides)
    itemsize = property(lambda self: self.a.itemsize)
    size = property(lambda self: self.a.size)

    def get(self, stream=None):
        return self.a.copy()


_DevArray.__module__ = "cupy"


class _Stream:
    ptr = 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


@pytest.fixture
def cuda_launches(monkeypatch):
    launches = []
    cp = types.ModuleType("cupy")
    cp.cuda = types.SimpleNamespace(get_current_stream=_Stream, Device=lambda *a: types.SimpleNamespace(id=0),
                                    runtime=types.SimpleNamespace(getDevice=lambda: 0))
    cp.zeros = lambda shape, dtype: _DevArray(np.zeros(shape, dtype))
    cp.empty = lambda shape, dtype: _DevArray(np.empty(shape, dtype))
    monkeypatch.setitem(sys.modules, "cupy", cp)
    module = types.SimpleNamespace(get_function=lambda name: lambda grid, block, args: launches.append(name))
    monkeypatch.setattr(cuda_backend._Module, "get", classmethod(lambda cls, source, name: module))
    return launches


def _cuda_runner(op):
    backend = cuda_backend.CudaBackend()
    return backend.load(op.plan, op.sources["cuda"])


def test_cuda_in_place_aliasing_is_rejected_before_launch(pair, cuda_launches):
    run = _cuda_runner(pair)
    pos = _DevArray(np.arange(5))
    same = _DevArray(_rng_qk())
    with pytest.raises(ValueError, match="q and k overlap in memory"):
        run(same, same, pos, inplace=True)
    x = np.zeros((5, 3, 8), np.float32)
    with pytest.raises(ValueError, match="q and k overlap"):
        run(_DevArray(x[:, 0:2]), _DevArray(x[:, 1:3]), pos, inplace=True)
    with pytest.raises(ValueError, match="q overlaps positions"):         # the first token of q
        run(_DevArray(x[:, 0:2]), _DevArray(_rng_qk()), _DevArray(x.reshape(-1).view(np.int64)[:5]), inplace=True)
    assert cuda_launches == []


def test_cuda_in_place_legal_sharing_reaches_the_launch(pair, cuda_launches):
    run = _cuda_runner(pair)
    pos = _DevArray(np.arange(5))
    x = np.zeros((5, 4, 8), np.float32)
    run(_DevArray(x[:, ::2]), _DevArray(x[:, 1::2]), pos, inplace=True)      # interleaved, disjoint
    q = _DevArray(_rng_qk())
    run(q, _DevArray(_rng_qk()), pos, inplace=True)                          # exactly over the sources
    run(q, q, pos)                                                           # read-only sharing
    assert len(cuda_launches) == 3
