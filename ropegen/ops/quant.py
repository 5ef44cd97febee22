"""Quantized (fp8) outputs, shared by the operator kinds: the check of `dtype = f8e4m3 | f8e5m2` with
`quant_scale = S` (or one scale per output, `[S1, S2]`), and the reference's saturation.

A quantized output stores saturate(round(v * s)): v the value the operator would otherwise store
(its kind says which: rmsnorm's value rounded to its unquantized output type, as vLLM's fused
RMSNorm + quant; rope's rotated value in the compute type, as FlashInfer's rope_quantize_fp8), s its
scale (float32, per tensor, or per head for rope), the product in the compute type, rounded once to
the fp8 grid to nearest even, values beyond the largest finite one (infinities too) set to it, NaN
kept. Every target spells the conversion in one helper (C `rg_store_*_f8e4m3`, ...)."""
from __future__ import annotations

import numpy as np

from ropegen.ir.dtypes import DTYPES, FLOAT_NAMES, QUANT_NAMES, DType
from ropegen.spec import ast as A


def check_dtype(cx, default: DType | None) -> DType | None:
    """The `dtype` setting: a float output type, or an fp8 one (which needs quant_scale)."""
    d = cx.setting("dtype")
    if d is None:
        return default
    return DTYPES[cx.word(d.value, "dtype", FLOAT_NAMES + QUANT_NAMES)]


def check_scales(cx, dtype: DType | None, outputs: list[tuple[str, object]]) -> tuple[str, ...]:
    """The scale input of each output (`outputs`: (name, the allowed sizes of its scale)); () when the
    output type is not quantized. One name serves every output; a list gives one per output."""
    s = cx.setting("quant_scale")
    quantized = dtype is not None and dtype.quantized
    if not quantized:
        if s is not None:
            cx.fail("C030", "quant_scale goes with an fp8 output: `dtype = f8e4m3` or `f8e5m2`", s.loc)
        return ()
    if s is None:
        cx.fail("C007", f"an {dtype.name} output needs `quant_scale = S`: a float32 input [1] the value is "
                "multiplied by before it is rounded to fp8", cx.settings["dtype"].loc)
    v = s.value
    values = list(v.items) if isinstance(v, A.ListValue) else [v] * len(outputs)
    if len(values) != len(outputs):
        cx.fail("C018", f"quant_scale lists {len(values)} inputs for {len(outputs)} outputs", v.loc)
    names = []
    for (out, sizes), item in zip(outputs, values):
        t = cx.ref(item, "quant_scale")
        got = [a.size for a in t.axes]
        if t.dtype.name != "f32" or len(got) != 1 or got[0] not in sizes:
            cx.fail("C018", f"quant_scale '{t.name}' of output '{out}' must be f32[{' or '.join(map(str, sizes))}]",
                    t.loc)
        names.append(t.name)
    return tuple(names)


def saturate(v: np.ndarray, dtype: DType) -> np.ndarray:
    """The reference's quantized value before its rounding: v clipped to the type's finite range."""
    return np.clip(v, -dtype.max_finite, dtype.max_finite)


def quantized(v: np.ndarray, scale: np.ndarray, dtype: DType) -> np.ndarray:
    """saturate(v * scale) in float64 (the reference leaves the final fp8 rounding to the tolerance)."""
    return saturate(v * np.asarray(scale, dtype=np.float64), dtype)
