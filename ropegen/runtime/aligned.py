"""The output arrays the host runtime allocates: large ones start on a 64-byte boundary.

NumPy aligns a new array to 16 bytes only, and glibc places a large allocation 16 bytes past a page
boundary, so every row of a large output began 16 bytes into a cache line: the kernels' 64-byte
non-temporal stores were split into 16-byte ones (llama3 bf16 q + k, one thread: 0.70-0.74 of the
copy at such an offset against 0.80-0.91 aligned). Small outputs (decode sizes) keep np.empty,
whose cost is what a decode call feels; a view of a larger buffer costs about a microsecond.
"""
from __future__ import annotations

from math import prod
from typing import Callable

import numpy as np

LINE = 64
# at least this many bytes: allocated on a line boundary
ALIGN_MIN_BYTES = 1 << 20


def allocator(shape: tuple[int, ...], dtype: np.dtype) -> Callable[[tuple[int, ...], np.dtype], np.ndarray]:
    """How an output of this shape and dtype (a np.dtype) is allocated: np.empty when it is small, on a
    line when it has ALIGN_MIN_BYTES or more. A bound call asks once per output."""
    return np.empty if dtype.itemsize * prod(shape) < ALIGN_MIN_BYTES else _on_a_line


def _on_a_line(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    nbytes = dtype.itemsize * prod(shape)
    raw = np.empty(nbytes + LINE, np.uint8)
    start = -raw.ctypes.data % LINE
    return raw[start:start + nbytes].view(dtype).reshape(shape)


def empty(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """np.empty(shape, dtype), starting on a 64-byte boundary when it has ALIGN_MIN_BYTES or more."""
    return allocator(shape, dtype)(shape, dtype)
