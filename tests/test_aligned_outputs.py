"""Outputs the host runtime allocates start on a cache line (ropegen/runtime/aligned.py): the kernels'
64-byte non-temporal stores then stay whole, and at decode sizes no vector store touches two lines.
Large outputs come from a pool of the buffers the caller dropped."""
from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import ropegen
from ropegen.backends.c.backend import CBackend
from ropegen.runtime import aligned

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16, np.int64])
def test_large_and_small_arrays_start_on_a_line(dtype):
    dtype = np.dtype(dtype)
    big = aligned.empty((aligned.ALIGN_MIN_BYTES // np.dtype(dtype).itemsize // 4, 4), dtype)
    assert big.ctypes.data % aligned.LINE == 0 and big.flags.c_contiguous and big.flags.writeable
    assert big.dtype == np.dtype(dtype) and big.nbytes == aligned.ALIGN_MIN_BYTES
    small = aligned.empty((3, 5), dtype)
    assert small.ctypes.data % aligned.LINE == 0 and small.flags.c_contiguous and small.flags.writeable
    assert small.shape == (3, 5) and small.dtype == dtype
    assert aligned.empty((0, 7), dtype).size == 0


@pytest.mark.skipif(CBackend().unavailable() is not None, reason=str(CBackend().unavailable()))
def test_the_c_backend_allocates_large_outputs_on_a_line():
    op = ropegen.compile(ROOT / "examples" / "llama3.rope")["llama3_8b"]
    rng = np.random.default_rng(3)
    T = 256      # q is 256 * 32 * 128 bf16 values: 2 MiB
    q = rng.standard_normal((T, 32, 128)).astype(ml_dtypes.bfloat16)
    k = rng.standard_normal((T, 8, 128)).astype(ml_dtypes.bfloat16)
    pos = rng.integers(0, 4096, T)
    for call in (lambda: op.run(q, k, pos, backend="c"), lambda: op.bind(q, k, pos, backend="c")(q, k, pos)):
        for _ in range(3):       # the first call binds, the next ones take the quick paths
            q_rot, k_rot = call()
            assert q_rot.ctypes.data % 64 == 0 and k_rot.nbytes < aligned.ALIGN_MIN_BYTES
    # the same bits as into arrays 16 bytes past a line, as NumPy places them
    raw = np.empty(q.nbytes + 128, np.uint8)
    off = (-raw.ctypes.data % 64) + 16
    out_q = raw[off:off + q.nbytes].view(q.dtype).reshape(q.shape)
    out_k = np.empty_like(k)
    op.run(q, k, pos, backend="c", out=(out_q, out_k))
    assert np.array_equal(out_q.view(np.uint16), q_rot.view(np.uint16))
    assert np.array_equal(out_k.view(np.uint16), k_rot.view(np.uint16))


@pytest.mark.skipif(CBackend().unavailable() is not None, reason=str(CBackend().unavailable()))
@pytest.mark.parametrize("fastcall", ["1", "0"])
def test_decode_size_outputs_start_on_a_line(fastcall, monkeypatch):
    # NumPy's own arrays start 16 bytes into a line, where each 64-byte store of f32 lanes touched two
    # lines (llama3 f32 q + k, T = 16: 25 us against 14 us): through the C fast path and Python both
    monkeypatch.setenv("ROPEGEN_FASTCALL", fastcall)
    op = ropegen.compile(ROOT / "examples" / "llama3.rope")["llama3_8b"]
    rng = np.random.default_rng(4)
    for T in (1, 2, 3, 5, 16):
        q = rng.standard_normal((T, 32, 128)).astype(ml_dtypes.bfloat16)
        k = rng.standard_normal((T, 8, 128)).astype(ml_dtypes.bfloat16)
        pos = rng.integers(0, 4096, T)
        want = [np.empty_like(q), np.empty_like(k)]
        op.run(q, k, pos, backend="c", out=tuple(want))
        bound = op.bind(q, k, pos, backend="c")
        for call in (lambda: op.run(q, k, pos, backend="c"), bound, lambda: bound(q, k, pos)):
            got = [call() for _ in range(3)]      # several alive at once: not one buffer reused
            for outs in got:
                assert [o.ctypes.data % 64 for o in outs] == [0, 0], T
                assert [o.shape for o in outs] == [q.shape, k.shape] and all(o.flags.writeable for o in outs)
                for o, w in zip(outs, want):
                    assert np.array_equal(o.view(np.uint16), w.view(np.uint16))


MIB = 1 << 20


def _addr(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def test_a_dropped_buffer_is_reused_and_one_still_used_never_is():
    pool = aligned._Pool(64 * MIB)
    a = pool.take(2 * MIB)
    first = _addr(a)
    assert first % aligned.LINE == 0 and a.nbytes == 2 * MIB
    del a
    b = pool.take(2 * MIB)
    assert _addr(b) == first
    # whatever still reaches the memory keeps it: the array, a view of a view, a typed reshape, an export
    for keep in (lambda x: x, lambda x: x[::3][1:], lambda x: x.view(np.float32).reshape(-1, 4), memoryview):
        held = keep(b)
        del b
        other = pool.take(2 * MIB)
        assert _addr(other) != first
        del other, held
        b = pool.take(2 * MIB)
        assert _addr(b) == first
    assert _addr(pool.take(3 * MIB)) != first      # another size: another buffer


def test_the_pool_keeps_at_most_its_limit_and_release_drops_the_free_buffers():
    pool = aligned._Pool(5 * MIB)
    a, b = pool.take(2 * MIB), pool.take(2 * MIB)
    c = pool.take(2 * MIB)          # would pass the limit while a and b are used: not kept
    assert pool.held == 4 * MIB
    addr_a = _addr(a)
    del a, c
    d = pool.take(3 * MIB)          # the free 2 MiB buffer is dropped to make room
    assert pool.held == 5 * MIB and _addr(d) != addr_a
    del d
    assert pool.release() == 3 * MIB and pool.held == 2 * MIB     # b is still used
    del b
    assert pool.release() == 2 * MIB and pool.held == 0 and not pool.by_size
    off = aligned._Pool(0)
    off.take(2 * MIB)
    assert off.held == 0 and not off.by_size


def test_the_pool_limit_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv(aligned.POOL_ENV, "16")
    assert aligned.pool_bytes() == 16 * MIB
    monkeypatch.setenv(aligned.POOL_ENV, "0")
    assert aligned.pool_bytes() == 0
    monkeypatch.setenv(aligned.POOL_ENV, "lots")
    with pytest.warns(RuntimeWarning, match="not a whole number of MiB"):
        assert aligned.pool_bytes() == aligned.POOL_MB * MIB


@pytest.mark.skipif(CBackend().unavailable() is not None, reason=str(CBackend().unavailable()))
@pytest.mark.parametrize("fastcall", ["1", "0"])
def test_op_run_reuses_dropped_outputs_and_never_one_the_caller_holds(fastcall, monkeypatch):
    monkeypatch.setenv("ROPEGEN_FASTCALL", fastcall)
    op = ropegen.compile(ROOT / "examples" / "llama3.rope")["llama3_8b"]
    rng = np.random.default_rng(5)
    T = 256      # q_rot is 2 MiB: from the pool
    args = [(rng.standard_normal((T, 32, 128)).astype(ml_dtypes.bfloat16),
             rng.standard_normal((T, 8, 128)).astype(ml_dtypes.bfloat16), rng.integers(0, 4096, T)) for _ in range(3)]
    want = [[np.array(x, copy=True) for x in op.run(*a, backend="c")] for a in args]
    bound = op.bind(*args[0], backend="c")
    for call in (lambda a: op.run(*a, backend="c"), lambda a: bound(*a)):
        first = call(args[0])[0]
        kept = first[::2]               # only a view of the first result survives
        held_at = _addr(first)
        del first
        second = call(args[1])[0]
        assert _addr(second) != held_at
        assert np.array_equal(kept.view(np.uint16), want[0][0][::2].view(np.uint16))   # not overwritten
        del kept, second
        pooled = len(aligned._POOL.by_size[2 * MIB])
        third = call(args[2])[0]        # takes a free buffer: the pool does not grow
        assert len(aligned._POOL.by_size[2 * MIB]) == pooled and third.ctypes.data % aligned.LINE == 0
        assert np.array_equal(third.view(np.uint16), want[2][0].view(np.uint16))
        del third
        again = call(args[0])[0]
        assert np.array_equal(again.view(np.uint16), want[0][0].view(np.uint16))


def test_empty_takes_what_numpy_takes():
    """aligned.empty, which the README offers for out= arrays: any dtype np.dtype takes and an int or a
    list for the shape, on a line."""
    for dtype in (np.float32, ml_dtypes.bfloat16, "f2", np.dtype(np.float64)):
        for shape in (7, [3, 5], (2, 32, 128)):
            a = aligned.empty(shape, dtype)
            assert a.dtype == np.dtype(dtype) and a.shape == ((7,) if shape == 7 else tuple(shape))
            assert a.ctypes.data % 64 == 0
