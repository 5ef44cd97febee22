"""The C kernel ABI: the exported function's parameter list (lower.abi.Param spelled in C), shared by
the templates and the ctypes call; C's reserved words and identifier mangling."""
from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ropegen.backends.c import facts
from ropegen.ir.dtypes import DTYPES
from ropegen.lower.abi import Param as _Param
from ropegen.lower.abi import WORDS_SUFFIX, mangle, symbols

if TYPE_CHECKING:   # annotations only: the plans belong to the ops slices
    from ropegen.ops.plan import Plan, RmsNormPlan, RopePlan

# Tensor names the spec checker refuses (they become parameter names): C keywords and the fixed-width
# types the generated code uses. Other clashes are renamed by c_ident.
C_KEYWORDS = frozenset("""auto break case char const continue default do double else enum extern float for goto if inline int long register restrict return short signed sizeof static struct switch typedef union unsigned void volatile while bool true false size_t int32_t int64_t uint16_t uint32_t""".split())

_C_RESERVED = frozenset("""
auto break case char const continue default do double else enum extern float for goto if inline int long
register restrict return short signed sizeof static struct switch typedef union unsigned void volatile while
_Alignas _Alignof _Atomic _Bool _Complex _Generic _Imaginary _Noreturn _Static_assert _Thread_local
int8_t int16_t int32_t int64_t uint8_t uint16_t uint32_t uint64_t size_t ptrdiff_t intptr_t uintptr_t
NULL main errno
""".split())


def c_ident(name: str, taken: set[str]) -> str:
    """A C parameter name for a spec name: unchanged unless reserved, internal (rg_/ropegen_) or taken."""
    return mangle(name, taken, _C_RESERVED)


# ---------------------------------------------------------------------------------------------
# the ABI

@dataclass(frozen=True)
class CParam(_Param):
    """A lower.abi.Param as the C target spells it (the words templates/c and the ctypes call read)."""

    axis: str | None = None      # stride: the header's word for it (batch | seq | token | head)

    @property
    def c_name(self) -> str:
        return self.name

    @property
    def c_type(self) -> str:
        """The C type of the parameter ("const float *", "int64_t", "int")."""
        if self.dtype is not None:
            return f"{'const ' if self.const else ''}{facts.element(self.dtype)} *"
        return "int" if self.bits == 32 else "int64_t"

    @property
    def decl(self) -> str:
        sep = "" if self.c_type.endswith("*") else " "
        return f"{self.c_type}{sep}{self.c_name}"

    @property
    def ctype(self):
        if self.is_pointer:
            return ctypes.c_void_p
        return ctypes.c_int if self.bits == 32 else ctypes.c_int64


def _shape_str(t) -> str:
    return f"{t.dtype.name}[{', '.join(map(str, t.shape))}]"


def _threads(taken: set[str]) -> CParam:
    return CParam(c_ident("threads", taken), ("threads",), bits=32, doc="OpenMP threads (values < 1 mean 1)")


def _dim(sym: str, taken: set[str]) -> CParam:
    return CParam(c_ident(sym, taken), ("dim", sym), doc=f"the size {sym}")


# The header's words for the canonical stride axes (lower/strides.py): packed tokens step along "s".
_AXIS_WORDS = {"t": (("s", "token"), ("h", "head")), "bs": (("b", "batch"), ("s", "seq"), ("h", "head"))}


def rope_abi(p: RopePlan) -> list[CParam]:
    taken: set[str] = set()
    names = {t.name: c_ident(t.name, taken) for t in p.inputs}
    outs = {s.out: c_ident(s.out, taken) for s in p.streams}
    syms = {s: c_ident(s, taken) for s in symbols(p)}
    params: list[CParam] = []

    def strides(tensor: str, cname: str) -> None:
        for a, word in _AXIS_WORDS[p.token_layout]:
            params.append(CParam(c_ident(f"{cname}_stride_{word}", taken), ("stride", tensor, a),
                                 doc=f"elements between consecutive {word}s of {tensor}", axis=word))

    for t in p.inputs:
        if t.heads is not None:
            params.append(CParam(names[t.name], ("in", t.name), t.dtype, True,
                                 doc=f"{_shape_str(t)}, head_dim contiguous, other axes strided"))
            strides(t.name, names[t.name])
        elif t.rank == 0:
            params.append(CParam(names[t.name], ("scalar", t.name), doc=f"the value of {t.name} ({t.dtype.name})"))
        else:
            params.append(CParam(names[t.name], ("in", t.name), t.dtype, True, doc=f"{_shape_str(t)}, contiguous"))
    for k, s in enumerate(p.streams):
        what = "rotated" if s.rotate else "copied"
        if p.out_dtype is not None:     # fp8: another type than the source's, so never in place
            params.append(CParam(outs[s.out], ("out", s.out), p.out_dtype,
                                 doc=f"{what} {s.src} times {p.quant_scales[k]}, as {p.out_dtype.name}: "
                                 f"the shape of {s.src}"))
        else:
            params.append(CParam(outs[s.out], ("out", s.out), p.storage,
                                 doc=f"{what} {s.src}: the shape of {s.src}, may equal it (in place)"))
        strides(s.out, outs[s.out])
    for s, c in syms.items():
        params.append(CParam(c, ("dim", s), doc=f"the size {s}"))
    unit = getattr(p.angles, "length_unit", None)
    if unit:
        rows = "one row per packed sequence" if unit == "sequence" else "one row"
        params.append(CParam(c_ident("inv_freq", taken), ("freq",), DTYPES["f64"], True,
                             doc=f"f64[units, {p.n_cols}], {rows}: the inverse frequencies at each length "
                             "(max position + 1), as ropegen's FrequencyRows computes them"))
    params.append(_threads(taken))
    return params


def rms_abi(p: RmsNormPlan) -> list[CParam]:
    """The inputs in declaration order, then y, then h (with a residual), the sizes, the threads."""
    taken: set[str] = set()
    x = next(t for t in p.inputs if t.name == p.x_name)
    params = [CParam(c_ident(t.name, taken), ("in", t.name), t.dtype, True, doc=f"{_shape_str(t)}, contiguous")
              for t in p.inputs]
    params.append(CParam(c_ident(p.out, taken), ("out", p.out), p.y,
                         doc=f"{p.y.name}, the shape of {x.name}, contiguous"))
    if p.residual:
        params.append(CParam(c_ident(p.sum_output, taken), ("out", p.sum_output), p.x,
                             doc=f"{p.x.name}, {x.name} + {p.residual}: the shape of {x.name}, contiguous, "
                             f"may equal {p.residual} (in place)"))
    for sym in symbols(p):
        params.append(_dim(sym, taken))
    params.append(_threads(taken))
    return params


# The exported function's parameters for each operator kind (the plan's `.kind` word).
ABIS = {"rope": rope_abi, "rmsnorm": rms_abi}


def abi(plan: Plan) -> list[CParam]:
    return ABIS[plan.kind](plan)


def function_name(plan: Plan) -> str:
    return f"ropegen_{plan.name}"


def words_function_name(plan: Plan) -> str:
    """The entry point taking the parameters as one array of 64-bit words (runtime/fastcall.py)."""
    return function_name(plan) + WORDS_SUFFIX


# The name templates/c and backends/c/context.py knew the C parameters by (same attributes).
Param = CParam
