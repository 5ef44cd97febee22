"""Random array helpers shared by every kind's test-input maker."""
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
