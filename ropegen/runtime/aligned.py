"""The output arrays the host runtime allocates: every one starts on a 64-byte boundary, and large
ones reuse the buffers of large outputs the caller has dropped.

NumPy aligns a new array to 16 bytes only, and glibc places an allocation 16 bytes past a line (a
large one past a page boundary), so every row of an output could begin 16 bytes into a cache line: the
kernels' 64-byte non-temporal stores were split into 16-byte ones (llama3 bf16 q + k, one thread:
0.70-0.74 of the copy at such an offset against 0.80-0.91 aligned), and at decode sizes each 64-byte
store of f32 lanes touched two lines (llama3 f32 q + k through op.bind, one thread: T = 1 1.7 us
against 1.1 us on a line, T = 16 25.4 against 14.1 us). A small output is therefore a view of a
fresh byte array LINE - 1 bytes longer (fresh_on_a_line; the C fast path, backends/c/fastcall.c,
makes the same view natively, for about 0.1 us).

A new large buffer is fresh pages from the system: glibc maps every allocation over 32 MiB anew and
unmaps it when freed, so each call faulted every 4 KiB page in and the system zeroed it. That more than
doubled a prefill call from Python (llama3 f32 q + k, T = 4096, one thread: `op.run` 19.2 ms against
8.6 ms for the same kernel writing preallocated outputs; bench/prefill_call.py). The pool keeps those
buffers, as PyTorch's caching allocator does: a buffer no array uses any more (no array, view or
export holds it: its reference count is the pool's own) is handed out again for an output of the same
size. It holds at most pool_bytes() in all ($ROPEGEN_OUTPUT_POOL_MB, default POOL_MB; 0 switches it
off); `release()` drops the buffers no array uses.
"""
from __future__ import annotations

import os
import sys
import threading
import warnings
from collections import OrderedDict
from math import prod
from typing import Callable

import numpy as np

LINE = 64
# at least this many bytes: allocated on a line boundary, from the pool
ALIGN_MIN_BYTES = 1 << 20


POOL_ENV, POOL_MB = "ROPEGEN_OUTPUT_POOL_MB", 1024


def pool_bytes() -> int:
    """The pool's limit: $ROPEGEN_OUTPUT_POOL_MB MiB (0: no pool), else POOL_MB; a malformed value is
    a warning, not an error (it is read at import) and leaves the default."""
    text = os.environ.get(POOL_ENV, "").strip()
    if not text:
        return POOL_MB << 20
    if text.isdigit():
        return int(text) << 20
    warnings.warn(f"{POOL_ENV}={text!r} is not a whole number of MiB (0 turns the output pool off); "
                  f"using {POOL_MB}", RuntimeWarning, stacklevel=2)
    return POOL_MB << 20


def _refs(bufs: list, i: int) -> int:
    return sys.getrefcount(bufs[i])


# the count _refs reports for a buffer that only the pool's list holds, measured here rather than assumed:
# interpreters differ in whether the call's own reference is counted
_ALONE = _refs([np.empty(1, np.uint8)], 0)


class _Pool:
    """uint8 buffers (the arrays that own the memory, LINE bytes over) by the size handed out, least
    recently used first; each is free when only the pool refers to it."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0
        self.by_size: OrderedDict[int, list[np.ndarray]] = OrderedDict()
        self.lock = threading.Lock()

    def take(self, nbytes: int) -> np.ndarray:
        """nbytes on a line: a view of a free pooled buffer, or of a new one."""
        with self.lock:
            bufs = self.by_size.get(nbytes)
            if bufs is not None:
                for i in range(len(bufs)):
                    if _refs(bufs, i) == _ALONE:
                        bufs.append(bufs.pop(i))       # most recently used last
                        self.by_size.move_to_end(nbytes)
                        return _line(bufs[-1], nbytes)
            raw = np.empty(nbytes + LINE, np.uint8)
            if nbytes <= self.limit:
                self._drop_free(self.held + nbytes - self.limit)
                if self.held + nbytes <= self.limit:
                    self.by_size.setdefault(nbytes, []).append(raw)
                    self.by_size.move_to_end(nbytes)
                    self.held += nbytes
            return _line(raw, nbytes)

    def _drop_free(self, need: int) -> None:
        """Drop free buffers, least recently used sizes first, until `need` bytes are dropped."""
        for nbytes in list(self.by_size):
            if need <= 0:
                return
            bufs = self.by_size[nbytes]
            i = 0
            while i < len(bufs) and need > 0:
                if _refs(bufs, i) == _ALONE:
                    del bufs[i]
                    self.held -= nbytes
                    need -= nbytes
                else:
                    i += 1
            if not bufs:
                del self.by_size[nbytes]

    def release(self) -> int:
        with self.lock:
            before = self.held
            self._drop_free(self.held)
            return before - self.held


def _line(raw: np.ndarray, nbytes: int) -> np.ndarray:
    """nbytes of raw from its first line boundary: a view whose base, and that of every array made from
    it, is raw itself (NumPy points a view of a view at the owner), which the pool counts."""
    start = -raw.ctypes.data % LINE
    return raw[start:start + nbytes]


_POOL = _Pool(pool_bytes())


def release() -> int:
    """Drop the pooled output buffers no array uses; returns how many bytes were dropped."""
    return _POOL.release()


def allocator(shape: tuple[int, ...], dtype: np.dtype) -> Callable[[tuple[int, ...], np.dtype], np.ndarray]:
    """How an output of this shape and dtype (a np.dtype) is allocated, always on a line: a fresh buffer
    when it is small, from the pool when it has ALIGN_MIN_BYTES or more. A bound call asks once per
    output."""
    return fresh_on_a_line if dtype.itemsize * prod(shape) < ALIGN_MIN_BYTES else _on_a_line


def fresh_on_a_line(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    nbytes = dtype.itemsize * prod(shape)
    return _line(np.empty(nbytes + LINE - 1, np.uint8), nbytes).view(dtype).reshape(shape)


def _on_a_line(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    return _POOL.take(dtype.itemsize * prod(shape)).view(dtype).reshape(shape)


def empty(shape: tuple[int, ...] | int, dtype) -> np.ndarray:
    """np.empty(shape, dtype), starting on a 64-byte boundary (from the pool when it has ALIGN_MIN_BYTES
    or more): outputs for out= that the kernels' vector stores write whole. dtype: anything np.dtype
    takes (np.float32, ml_dtypes.bfloat16, "f2")."""
    if type(shape) is not tuple:
        shape = (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(n) for n in shape)
    if not isinstance(dtype, np.dtype):
        dtype = np.dtype(dtype)
    return allocator(shape, dtype)(shape, dtype)
