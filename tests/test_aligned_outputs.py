"""Outputs the host runtime allocates start on a cache line when large (ropegen/runtime/aligned.py):
the kernels' 64-byte non-temporal stores then stay whole. Small (decode-size) outputs stay np.empty."""
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
def test_large_arrays_start_on_a_line_and_small_ones_are_plain(dtype):
    dtype = np.dtype(dtype)
    big = aligned.empty((aligned.ALIGN_MIN_BYTES // np.dtype(dtype).itemsize // 4, 4), dtype)
    assert big.ctypes.data % aligned.LINE == 0 and big.flags.c_contiguous and big.flags.writeable
    assert big.dtype == np.dtype(dtype) and big.nbytes == aligned.ALIGN_MIN_BYTES
    small = aligned.empty((3, 5), dtype)
    assert small.flags.owndata and small.shape == (3, 5)
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
