"""CUDA C++ language facts: how CUDA spells each dtype, float literal, correctly rounded intrinsic,
sincos function and kernel parameter type, and its reserved words.

Tables keyed by ropegen's own words (dtype names, integer widths, the trig mode); the CUDA
templates look them up (template global `cuda`) and no Python module spells CUDA source.
"""
from __future__ import annotations

from ropegen.ir.dtypes import DTYPES
from ropegen.lower import abi
from ropegen.render import c_double, c_float

# The CUDA type of each dtype (f16 / bf16 as the cuda_fp16.h / cuda_bf16.h types).
TYPES = {"f64": "double", "f32": "float", "f16": "__half", "bf16": "__nv_bfloat16",
         "i32": "int", "i64": "long long", "u32": "unsigned int",
         "f8e4m3": "unsigned char", "f8e5m2": "unsigned char"}     # fp8 outputs travel as their bits

# Integers passed by value, by width.
INTS = {32: "int", 64: "long long"}

# The words of the shared SIMT templates (templates/gpu, template global `lang`, with the tables
# above and below): the 64-bit index type and its literal suffix, a compile-time int, block-shared
# memory, the address space of device pointers (none in CUDA), the atomic OR of the error word,
# how a call passes an out argument (C++ references), thread and block indices, the template
# of macros spelling the parameterised words, and the size of the block-sum scratch.
I64 = INTS[64]
I64_SUFFIX = "LL"
CONST_INT = "constexpr int"
SHARED = "__shared__"
GLOBAL = ""
ATOMIC_OR = "atomicOr"
OUT_ARG = ""
GROUP_ID = ("blockIdx.x", "blockIdx.y", "blockIdx.z")
NUM_GROUPS = ("gridDim.x", "gridDim.y", "gridDim.z")
LOCAL_ID = ("threadIdx.x", "threadIdx.y", "threadIdx.z")
SIMT = "cuda/_simt.cu.j2"
# Spelled before a loop whose floating-point steps must run in order (never vectorized as a reduction).
ORDERED_LOOP = ""
# How a generated source says it must be built (a comment line).
BUILD_NOTE = "Compile with FMA contraction off (nvcc -fmad=false, NVRTC --fmad=false) and without fast-math flags."
# The RMSNorm kernel attribute that sizes the block-sum scratch (one partial sum per warp).
REDUCE_SLOTS = "warps"

# Correctly rounded, never contracted arithmetic of each floating arithmetic type.
MUL = {"f64": "__dmul_rn", "f32": "__fmul_rn"}
ADD = {"f64": "__dadd_rn", "f32": "__fadd_rn"}
SUB = {"f64": "__dsub_rn", "f32": "__fsub_rn"}
DIV = {"f64": "__ddiv_rn", "f32": "__fdiv_rn"}
SQRT = {"f64": "__dsqrt_rn", "f32": "__fsqrt_rn"}

# A float literal of each arithmetic type that reads back exactly.
LITERAL = {"f64": c_double, "f32": c_float}

# float sincos by trig mode (the spec's `trig fast` opts into the intrinsic), and sincos of pi * x.
SINCOSF = {"accurate": "sincosf", "fast": "__sincosf"}
SINCOSPI = {"f64": "sincospi", "f32": "sincospif"}
D2F = "__double2float_rn"     # double to float, to nearest even

# The fp8 conversions (templates/gpu/_fp8.inc.j2) work on a float's bits, not on cuda_fp8.h: the
# unsigned type of each width, its literal suffix, and the bit cast of each source dtype.
UINTS = {32: "unsigned int", 64: "unsigned long long"}
UINT_SUFFIX = {32: "u", 64: "ull"}
AS_BITS = {"f32": "__float_as_uint", "f64": "__double_as_longlong"}

# Spellings of the shared angle functions (templates/gpu/_angle_functions.inc.j2): a device-wide
# constant, an inlined device function, an out parameter and its assignment, a float constant.
DEVICE_CONST = "__device__ const"
FUNC = "__device__ __forceinline__"
OUT_PARAM = "&"
OUT_REF = ""
CONST_FLOAT = "constexpr float"
CONST_I64 = "constexpr long long"


def param_type(dtype_name: str | None, const: bool, bits: int) -> str:
    """How a kernel signature spells a parameter's type: `[const ]T*` for a pointer to dtype
    `dtype_name`, the integer type of width `bits` for a value."""
    if dtype_name is None:
        return INTS[bits]
    return ("const " if const else "") + TYPES[dtype_name] + "*"


class Param(abi.Param):
    """lower/abi.Param with its type as a CUDA signature spells it (the GPU parameter lists of
    lower/gpu/abi.py are built of these)."""

    @property
    def ctype(self) -> str:
        return param_type(self.dtype.name if self.dtype else None, self.const, self.bits)


# Words a tensor name may not be (it becomes a kernel parameter): C's keywords and fixed-width
# types, and CUDA's half type.
RESERVED = frozenset("""
auto break case char const continue default do double else enum extern float for goto if inline int long
register restrict return short signed sizeof static struct switch typedef union unsigned void volatile while
bool true false size_t int32_t int64_t uint16_t uint32_t half
""".split())

if set(TYPES) != set(DTYPES):
    raise AssertionError(f"CUDA spells {sorted(TYPES)}, the dtype table has {sorted(DTYPES)}")
