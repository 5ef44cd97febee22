"""The NumPy peer: ropegen's own NumPy backend, the plain-array baseline every kernel is set beside."""
from __future__ import annotations

from typing import Any

import numpy as np

from ropegen.bench.harness import timed_beside

# the NumPy backend is slow at benchmark sizes: a few rounds tell its speed
NUMPY_REPEATS = 3


def measure(op, arrays: dict[str, np.ndarray], nbytes: int, threads: int, repeats: int,
            measured: str, beside=None, flush=None) -> dict[str, Any]:
    args = [arrays[n] for n in op.inputs]
    try:
        return timed_beside(lambda: op.run(*args, backend="numpy"), beside, max(1, min(repeats, NUMPY_REPEATS)),
                            nbytes, flush)
    except Exception as exc:  # a peer failing is reported, not raised
        return {"error": f"{type(exc).__name__}: {exc}"}
