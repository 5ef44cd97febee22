"""The float64 RMSNorm reference, from its definition (reads the IR, never the plan)."""
from __future__ import annotations

import numpy as np

from ropegen import ir


def evaluate(op: ir.RmsNormOp, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    x = np.asarray(arrays[op.x.name]).astype(np.float64)
    w = np.asarray(arrays[op.scale.name]).astype(np.float64)
    axes = tuple(range(op.axis, x.ndim))
    ms = np.mean(x * x, axis=axes, keepdims=True)
    return {op.output: x / np.sqrt(ms + op.epsilon) * w}


def tolerance_dtype(op: ir.RmsNormOp):
    # stage one is rounded back to x's type, so the coarser of x and scale bounds the error
    return min((op.x.dtype, op.scale.dtype), key=lambda d: d.mantissa_bits)
