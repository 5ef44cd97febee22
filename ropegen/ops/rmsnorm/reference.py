"""The float64 RMSNorm reference, from its definition (reads the IR, never the plan)."""
from __future__ import annotations

import numpy as np

from ropegen import ir
from ropegen.ops import quant


def _rounded(v: np.ndarray, dtype) -> np.ndarray:
    """v rounded to a storage type (ml_dtypes' bfloat16 included), back in float64."""
    return v.astype(dtype.np_dtype).astype(np.float64)


def normalize(s: np.ndarray, w: np.ndarray, epsilon: float, cast: str, x_dtype, axes: tuple[int, ...]) -> np.ndarray:
    """s / sqrt(mean(s^2 over axes) + epsilon) * w in float64, the normalized value rounded to x's
    type first when `cast = before_scale`; `w` already holds the weight offset."""
    ms = np.mean(s * s, axis=axes, keepdims=True)
    normalized = s / np.sqrt(ms + epsilon)
    if cast == "before_scale":
        with np.errstate(over="ignore", invalid="ignore"):
            normalized = _rounded(normalized, x_dtype)
    return normalized * w


def evaluate(op: ir.RmsNormOp, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The stated roundings are applied stage by stage: the residual sum rounded to x's type when
    `residual_add = storage` (what the models normalize), the normalized value rounded to x's type
    before the scale when `cast = before_scale`; the rest is exact arithmetic in float64."""
    x = np.asarray(arrays[op.x.name]).astype(np.float64)
    w = np.asarray(arrays[op.scale.name]).astype(np.float64) + op.weight_offset
    out = {}
    if op.residual:
        x = x + np.asarray(arrays[op.residual]).astype(np.float64)
        out[op.sum_output] = _rounded(x, op.x.dtype)
        if op.residual_add == "storage":
            x = out[op.sum_output]
    y = normalize(x, w, op.epsilon, op.cast, op.x.dtype, tuple(range(op.axis, x.ndim)))
    if op.quant_scale:      # fp8: the value stored as y_unquantized, times the scale, saturated
        with np.errstate(over="ignore", invalid="ignore"):
            y = quant.quantized(_rounded(y, op.y_unquantized), np.asarray(arrays[op.quant_scale]).reshape(()),
                                op.y)
    out[op.output] = y
    return out


def tolerance_dtype(op: ir.RmsNormOp):
    # the coarsest of x, scale and y bounds the error (stage one's rounding is in the reference)
    return min((op.x.dtype, op.scale.dtype, op.y), key=lambda d: d.mantissa_bits)
