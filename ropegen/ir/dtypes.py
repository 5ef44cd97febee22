"""The one dtype table: every fact about a storage or compute type lives in a single row here."""
from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np


@dataclass(frozen=True)
class DType:
    """One element type: its numeric facts and how exactly check compares it (targets spell it in their
    own facts modules, backends/<target>/facts.py)."""

    name: str            # spelling in .rope specs
    numpy: str           # numpy dtype name (bfloat16 comes from ml_dtypes)
    itemsize: int
    is_float: bool
    mantissa_bits: int   # explicit fraction bits; 0 for integers
    rtol: float          # check tolerance vs the float64 reference (relative part)
    atol: float          # check tolerance (absolute part, for values near zero)
    onnx: int            # TensorProto.DataType code
    onnx_name: str       # ONNX's spelling of the type
    dlpack: tuple[int, int]   # DLPack (type code, bits)
    torch: str           # attribute of the torch module
    max_finite: float = 0.0    # quantized output types: the largest finite value (they saturate to it)
    min_exponent: int = 0      # ... and the exponent of their smallest normal value (subnormal spacing:
    #                            2^(min_exponent - mantissa_bits))
    nan_code: int = 0          # quantized output types: the bits a NaN becomes (sign added), as ml_dtypes writes it

    @property
    def quantized(self) -> bool:
        """An 8-bit float output type: never an input; written as saturate(round(value * scale))."""
        return self.max_finite > 0

    @property
    def np_dtype(self) -> np.dtype:
        if self.name == "bf16" or self.quantized:
            return np.dtype(getattr(ml_dtypes, self.numpy))
        return np.dtype(self.numpy)

    @property
    def eps(self) -> float:
        return 2.0 ** -self.mantissa_bits if self.is_float else 0.0


# Tolerances: a few units in the last place of the storage type, because a kernel rounds its
# inputs' products once in the compute type and once more on the store.
_ROWS = (
    DType("f64", "float64", 8, True, 52, 1e-12, 1e-12, 11, "double", (2, 64), "float64"),
    DType("f32", "float32", 4, True, 23, 2e-6, 2e-6, 1, "float", (2, 32), "float32"),
    DType("f16", "float16", 2, True, 10, 2e-3, 2e-3, 10, "float16", (2, 16), "float16"),
    DType("bf16", "bfloat16", 2, True, 7, 1.6e-2, 1.6e-2, 16, "bfloat16", (4, 16), "bfloat16"),
    DType("i32", "int32", 4, False, 0, 0.0, 0.0, 6, "int32", (0, 32), "int32"),
    DType("i64", "int64", 8, False, 0, 0.0, 0.0, 7, "int64", (0, 64), "int64"),
    DType("u32", "uint32", 4, False, 0, 0.0, 0.0, 12, "uint32", (1, 32), "uint32"),
    # fp8 outputs (OCP E4M3 "fn": no infinities, max 448; E5M2: max 57344): one unit in the last place
    # relative, the rounding of the quantization itself
    DType("f8e4m3", "float8_e4m3fn", 1, True, 3, 1.25e-1, 2.0 ** -9, 17, "float8e4m3fn", (10, 8), "float8_e4m3fn",
          max_finite=448.0, min_exponent=-6, nan_code=0x7F),
    DType("f8e5m2", "float8_e5m2", 1, True, 2, 2.5e-1, 2.0 ** -16, 19, "float8e5m2", (12, 8), "float8_e5m2",
          max_finite=57344.0, min_exponent=-14, nan_code=0x7E),
)

DTYPES: dict[str, DType] = {row.name: row for row in _ROWS}
INPUT_DTYPES: dict[str, DType] = {row.name: row for row in _ROWS if not row.quantized}   # what `in` may declare
FLOAT_NAMES = tuple(d.name for d in _ROWS if d.is_float and not d.quantized)
QUANT_NAMES = tuple(d.name for d in _ROWS if d.quantized)
INT_NAMES = tuple(d.name for d in _ROWS if not d.is_float)


def by_name(name: str) -> DType:
    return DTYPES[name]


def from_numpy(dtype: np.dtype) -> DType | None:
    """The table row for a numpy dtype, or None when ropegen has no such type."""
    dtype = np.dtype(dtype)
    for row in _ROWS:
        if row.np_dtype == dtype:
            return row
    return None
