"""The C kernel ABI: the exported function's parameter list, shared by the templates and the ctypes wrapper."""
from __future__ import annotations

import ctypes
from dataclasses import dataclass


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
    out = name
    if out in _C_RESERVED or out.startswith(("rg_", "ropegen_", "ROPEGEN_", "__")):
        out = "u_" + out   # the internal prefixes are the generated code's own namespace
    while out in _C_RESERVED or out in taken:
        out = out + "_"
    taken.add(out)
    return out


# ---------------------------------------------------------------------------------------------
# the ABI

@dataclass(frozen=True)
class Param:
    """One parameter of an exported kernel function."""

    kind: str            # in | out | stride | scalar | dim | threads
    c_name: str
    c_type: str          # the C type of the parameter ("const float *", "int64_t", "int")
    doc: str
    tensor: str | None = None    # the spec tensor (in, out, stride, scalar) or symbol (dim)
    axis: str | None = None      # stride: batch | seq | token | head

    @property
    def decl(self) -> str:
        sep = "" if self.c_type.endswith("*") else " "
        return f"{self.c_type}{sep}{self.c_name}"

    @property
    def ctype(self):
        if self.kind in ("in", "out"):
            return ctypes.c_void_p
        return ctypes.c_int if self.kind == "threads" else ctypes.c_int64


def _shape_str(t) -> str:
    return f"{t.dtype.name}[{', '.join(map(str, t.shape))}]"


def _symbols(plan: Plan) -> list[str]:
    seen: list[str] = []
    for t in plan.inputs:
        for d in t.shape:
            if isinstance(d, str) and d not in seen:
                seen.append(d)
    return seen


def rope_abi(p: RopePlan) -> list[Param]:
    taken: set[str] = set()
    names = {t.name: c_ident(t.name, taken) for t in p.inputs}
    outs = {s.out: c_ident(s.out, taken) for s in p.streams}
    syms = {s: c_ident(s, taken) for s in _symbols(p)}
    axes = ("token", "head") if p.token_layout == "t" else ("batch", "seq", "head")
    params: list[Param] = []

    def strides(tensor: str, cname: str) -> None:
        for a in axes:
            params.append(Param("stride", c_ident(f"{cname}_stride_{a}", taken), "int64_t",
                                f"elements between consecutive {a}s of {tensor}", tensor, a))

    for t in p.inputs:
        if t.heads is not None:
            params.append(Param("in", names[t.name], f"const {t.dtype.c_type} *",
                                f"{_shape_str(t)}, head_dim contiguous, other axes strided", t.name))
            strides(t.name, names[t.name])
        elif t.rank == 0:
            params.append(Param("scalar", names[t.name], "int64_t", f"the value of {t.name} ({t.dtype.name})",
                                t.name))
        else:
            params.append(Param("in", names[t.name], f"const {t.dtype.c_type} *", f"{_shape_str(t)}, contiguous",
                                t.name))
    for s in p.streams:
        what = "rotated" if s.rotate else "copied"
        params.append(Param("out", outs[s.out], f"{p.storage.c_type} *",
                            f"{what} {s.src}: the shape of {s.src}, may equal it (in place)", s.out))
        strides(s.out, outs[s.out])
    for s, c in syms.items():
        params.append(Param("dim", c, "int64_t", f"the size {s}", s))
    params.append(Param("threads", c_ident("threads", taken), "int", "OpenMP threads (values < 1 mean 1)"))
    return params


def rms_abi(p: RmsNormPlan) -> list[Param]:
    taken: set[str] = set()
    x, s = p.inputs
    params = [Param("in", c_ident(x.name, taken), f"const {x.dtype.c_type} *", f"{_shape_str(x)}, contiguous",
                    x.name),
              Param("in", c_ident(s.name, taken), f"const {s.dtype.c_type} *", f"{_shape_str(s)}, contiguous",
                    s.name),
              Param("out", c_ident(p.out, taken), f"{p.y.c_type} *",
                    f"{p.y.name}, the shape of {x.name}, contiguous", p.out)]
    for sym in _symbols(p):
        params.append(Param("dim", c_ident(sym, taken), "int64_t", f"the size {sym}", sym))
    params.append(Param("threads", c_ident("threads", taken), "int", "OpenMP threads (values < 1 mean 1)"))
    return params


def abi(plan: Plan) -> list[Param]:
    return rope_abi(plan) if isinstance(plan, RopePlan) else rms_abi(plan)


def function_name(plan: Plan) -> str:
    return f"ropegen_{plan.name}"


