"""OpenCL C 1.2 language facts: how OpenCL spells each dtype, the words of the shared SIMT
templates, correctly rounded arithmetic, kernel parameter types, build options and reserved words.

Tables keyed by ropegen's own words; the OpenCL templates look them up (template global `lang`)
and no Python module spells OpenCL source.
"""
from __future__ import annotations

from ropegen.ir.dtypes import DTYPES
from ropegen.lower import abi
from ropegen.render import c_double, c_float

# The OpenCL type of each dtype. f16 and bf16 are held as their bits (ushort): OpenCL 1.2 has no
# half arithmetic without cl_khr_fp16, so the prelude converts f16 and bf16 by integer arithmetic
# on their bits; cvt_<from>_<to> names the dtypes, never the C type.
TYPES = {"f64": "double", "f32": "float", "f16": "ushort", "bf16": "ushort",
         "i32": "int", "i64": "long", "u32": "uint",
         "f8e4m3": "uchar", "f8e5m2": "uchar"}     # fp8 outputs travel as their bits
INTS = {32: "int", 64: "long"}

# The words of the shared SIMT templates (backends/cuda/facts.py says what each one is).
I64 = INTS[64]
I64_SUFFIX = "L"
CONST_INT = "const int"
SHARED = "__local"
GLOBAL = "__global "
ATOMIC_OR = "atomic_or"
OUT_ARG = "&"
GROUP_ID = ("get_group_id(0)", "get_group_id(1)", "get_group_id(2)")
NUM_GROUPS = ("get_num_groups(0)", "get_num_groups(1)", "get_num_groups(2)")
LOCAL_ID = ("get_local_id(0)", "get_local_id(1)", "get_local_id(2)")
SIMT = "opencl/_simt.cl.j2"
# Intel's CPU OpenCL compiler vectorizes a float product loop as a reassociated reduction even
# without fast-math options (ggml's running product then drifts by ulps); clang-based compilers
# honour this pragma, and the others ignore it.
ORDERED_LOOP = '_Pragma("clang loop vectorize(disable) interleave(disable)") '
REDUCE_SLOTS = "block"     # no warp shuffles in OpenCL 1.2: the block sum is a tree in local memory

# Correctly rounded, never contracted arithmetic (functions of the prelude, _prelude.cl.j2).
MUL = {"f64": "mul_f64", "f32": "mul_f32"}
ADD = {"f64": "add_f64", "f32": "add_f32"}
SUB = {"f64": "sub_f64", "f32": "sub_f32"}
DIV = {"f64": "div_f64", "f32": "div_f32"}
SQRT = {"f64": "sqrt", "f32": "sqrt_f32"}
LITERAL = {"f64": c_double, "f32": c_float}

# sincos by trig mode and sincos of pi * x (functions of the prelude over OpenCL's sin/cos builtins).
SINCOSF = {"accurate": "sincospi_f32", "fast": "sincos_native"}
SINCOSPI = {"f64": "sincospi_f64", "f32": "sincospi_f32"}
D2F = "convert_float_rte"
# fp8 conversions on a float's bits (templates/gpu/_fp8.inc.j2): unsigned types, suffixes, bit casts.
UINTS = {32: "uint", 64: "ulong"}
UINT_SUFFIX = {32: "u", 64: "ul"}
AS_BITS = {"f32": "as_uint", "f64": "as_ulong"}
DEVICE_CONST = "__constant"
FUNC = "static inline"
OUT_PARAM = "*"
OUT_REF = "*"
CONST_FLOAT = "__constant float"
CONST_I64 = "__constant long"

# Options every program is built with: OpenCL C 1.2, correctly rounded f32 division and square root
# (what a device without cl_khr_fp64 needs; the prelude goes through double where it can).
# Never -cl-fast-relaxed-math, -cl-mad-enable or -cl-unsafe-math-optimizations.
BUILD_OPTIONS = ("-cl-std=CL1.2", "-cl-fp32-correctly-rounded-divide-sqrt")
BUILD_NOTE = ("Build with " + " ".join(BUILD_OPTIONS) + " and no fast-math option; the source turns "
              "contraction off.")


class Param(abi.Param):
    """lower/abi.Param with its OpenCL type: `__global [const ]T*` or the integer of its width. A
    pointer is passed as a buffer and an element offset, `<name>_base` and `<name>_off` (OpenCL 1.2
    gives the host no device addresses)."""

    @property
    def ctype(self) -> str:
        if self.dtype is None:
            return INTS[self.bits]
        return "__global " + ("const " if self.const else "") + TYPES[self.dtype.name] + "*"


# Words a tensor name may not be: the kernel parameters are prefixed (t_, x_, y_), so OpenCL adds
# none beyond the C words the other targets already refuse.
RESERVED: frozenset[str] = frozenset()

if set(TYPES) != set(DTYPES):
    raise AssertionError(f"OpenCL spells {sorted(TYPES)}, the dtype table has {sorted(DTYPES)}")
