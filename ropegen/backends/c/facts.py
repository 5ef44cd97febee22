"""The C target's language facts: how C spells each element and arithmetic type, and the names of the
helpers templates/c/_dtypes.inc.j2 defines. Every C word the render context hands a template is
looked up here; a pair with no helper fails at render time, not in the C compiler."""
from __future__ import annotations

from ropegen.ir.dtypes import DType
from ropegen.render import c_double, c_float

# Element (storage) types as C spells them: f16 / bf16 travel as their raw uint16_t bits.
ELEMENT = {"f64": "double", "f32": "float", "f16": "uint16_t", "bf16": "uint16_t",
           "i32": "int32_t", "i64": "int64_t", "u32": "uint32_t",
           "f8e4m3": "uint8_t", "f8e5m2": "uint8_t"}     # fp8 outputs travel as their bits

# Arithmetic types: f16r / bf16r are floats holding values of the storage grid (compute = storage),
# every product and sum rounded back onto it by ROUND.
ARITH = {"f64": "double", "f32": "float", "f16r": "float", "bf16r": "float"}
ROUND = {"f64": "", "f32": "", "f16r": "rg_round_f16", "bf16r": "rg_round_bf16"}
# the same roundings in 32-bit lanes, for the vector variants' pair loops (the bf16 one in rope.c.j2).
# bf16's drops the NaN select: there every operand is a bf16 value widened (its low 16 bits zero), and
# so is a NaN made or passed on by x86 arithmetic, which the plain rounding returns unchanged, sign
# included; only its payload may differ from the canonical one, and rg_bf16_out_fast writes every NaN
# as the canonical one (an operation on two NaNs picks by operand order, never by payload)
GRID = {"f16r": "rg_grid_f16", "bf16r": "rg_grid_bf16_fast"}
# ... and the same rounding of a vector register, per instruction set (_dispatch.inc.j2)
VGRID = {"f16r": "rg_vgrid_f16_{isa}", "bf16r": "rg_vgrid_bf16_{isa}"}
SQRT = {"f64": "sqrt", "f32": "sqrtf"}
# a constant of a float arithmetic type, printed so that it reads back exactly
LITERAL = {"f64": c_double, "f32": c_float}

# rg_load_<element>_<arithmetic>: one element into the arithmetic type (as NumPy casts it)
LOAD = {
    ("f32", "f32"): "rg_load_f32_f32", ("f32", "f64"): "rg_load_f32_f64",
    ("f32", "f16r"): "rg_load_f32_f16r", ("f32", "bf16r"): "rg_load_f32_bf16r",
    ("f64", "f32"): "rg_load_f64_f32", ("f64", "f64"): "rg_load_f64_f64",
    ("f64", "f16r"): "rg_load_f64_f16r", ("f64", "bf16r"): "rg_load_f64_bf16r",
    ("f16", "f32"): "rg_load_f16_f32", ("f16", "f64"): "rg_load_f16_f64",
    ("f16", "f16r"): "rg_load_f16_f16r", ("f16", "bf16r"): "rg_load_f16_bf16r",
    ("bf16", "f32"): "rg_load_bf16_f32", ("bf16", "f64"): "rg_load_bf16_f64",
    ("bf16", "f16r"): "rg_load_bf16_f16r", ("bf16", "bf16r"): "rg_load_bf16_bf16r",
}
# rg_store_<arithmetic>_<element>: round a result to the element type
STORE = {
    ("f32", "f32"): "rg_store_f32_f32", ("f32", "f64"): "rg_store_f32_f64",
    ("f32", "f16"): "rg_store_f32_f16", ("f32", "bf16"): "rg_store_f32_bf16",
    ("f64", "f32"): "rg_store_f64_f32", ("f64", "f64"): "rg_store_f64_f64",
    ("f64", "f16"): "rg_store_f64_f16", ("f64", "bf16"): "rg_store_f64_bf16",
    ("f16r", "f16"): "rg_store_f16r_f16", ("bf16r", "bf16"): "rg_store_bf16r_bf16",
    # fp8 outputs (in _dtypes.inc.j2 only when the context sets `fp8`): one rounding, saturating
    ("f32", "f8e4m3"): "rg_store_f32_f8e4m3", ("f32", "f8e5m2"): "rg_store_f32_f8e5m2",
    ("f64", "f8e4m3"): "rg_store_f64_f8e4m3", ("f64", "f8e5m2"): "rg_store_f64_f8e5m2",
}


def element(d: DType) -> str:
    return ELEMENT[d.name]


def arith_name(compute: DType, storage_rounding: bool) -> str:
    """The arithmetic type's helper suffix: f32, f64, or f16r / bf16r for rounded storage arithmetic."""
    if storage_rounding and compute.name in ("f16", "bf16"):
        return compute.name + "r"
    return compute.name


def load(element_type: str, arith: str) -> str:
    return LOAD[element_type, arith]


def store(arith: str, element_type: str) -> str:
    return STORE[arith, element_type]


def quant_arith(arith: str) -> str:
    """The type an fp8 output's value times its scale is computed in: f64 with f64 arithmetic, else f32
    (f16r / bf16r values are floats on the storage grid; their product with the scale is not rounded)."""
    return "f64" if arith == "f64" else "f32"
