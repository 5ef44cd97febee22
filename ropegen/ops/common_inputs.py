"""Random array helpers and shape resolution shared by every kind's input makers (tests and benchmarks)."""
from __future__ import annotations

import numpy as np


def random_floats(rng: np.random.Generator, shape, dtype, scale: float = 1.0) -> np.ndarray:
    return (rng.standard_normal(shape) * scale).astype(dtype.np_dtype)


def strided_copy(rng: np.random.Generator, a: np.ndarray) -> np.ndarray:
    """The same values as `a`, seen through a view with a gap after every element of axis 0."""
    if a.ndim == 0 or a.shape[0] == 0:
        return a
    big = np.empty((a.shape[0] * 2,) + a.shape[1:], dtype=a.dtype)
    big[::2] = a
    big[1::2] = a[::-1] if a.shape[0] else a
    return big[::2]


def resolve(t, sizes: dict[str, int]) -> tuple[int, ...]:
    """The shape of tensor `t` with its symbols sized from `sizes`."""
    return tuple(sizes[a.size] if isinstance(a.size, str) else int(a.size) for a in t.axes)
