"""The C backend: one C11 header + source per operator, built on demand and called through ctypes.

This module decides the kernel ABI (the parameter list of the exported function, shared by the
templates and the ctypes wrapper), the render context (type names, conversion helpers, constants)
and the Python-side wrapper that validates arrays, allocates outputs and maps error codes to
ValueError. Building and caching live in ropegen.backends.c.build.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ropegen import ir
from ropegen.runtime import aliasing
from ropegen.backends.c import build as cbuild
from ropegen.ir.dtypes import DType
from ropegen.ops.plan import ExactAngles, GgmlAngles, Plan, RmsNormPlan, RopePlan, TableAnglesPlan
from ropegen.render import c_double, c_float, render
from ropegen.backends.base import Backend, Kernel, bind_shape

# Tokens (rope) or rows (rmsnorm) are handed to threads in chunks of about this many input bytes:
# small enough to balance two busy cores, large enough that scheduling costs nothing.
CHUNK_BYTES = 256 * 1024

# Out-of-place outputs at least this large are written with non-temporal stores (they would not
# stay in cache anyway): above a typical last-level cache share, where memcpy streams too.
STREAM_BYTES = 32 * 1024 * 1024


def _stream_min(out: DType, bytes_per_item: int) -> int:
    """Tokens (rows) from which outputs are streamed; 0: never. Measured: streaming pays for 4- and
    8-byte elements; 2-byte ones convert more per byte and gain nothing (RMSNorm bf16 lost 10%)."""
    if out.itemsize < 4:
        return 0
    return max(1, STREAM_BYTES // max(1, bytes_per_item))


# Status codes of every generated kernel (the header's ROPEGEN_* enum).
OK, EPOSITION, ESEQUENCES, EARG, ENOMEM, EOVERFLOW = 0, 1, 2, 3, 4, 5

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


# ---------------------------------------------------------------------------------------------
# render context

def arith_name(compute: DType, storage_rounding: bool) -> str:
    """The arithmetic type's helper suffix: f32, f64, or f16r / bf16r for rounded storage arithmetic."""
    if storage_rounding and compute.name in ("f16", "bf16"):
        return compute.name + "r"
    return compute.name


def arith_c_type(arith: str) -> str:
    return "double" if arith == "f64" else "float"


def _round_fn(arith: str) -> str:
    return {"f16r": "rg_round_f16", "bf16r": "rg_round_bf16"}.get(arith, "")


def _size_expr(v: ir.Size, params: list[Param]) -> str:
    if isinstance(v, int):
        return f"(int64_t){v}"
    return next(q.c_name for q in params if q.kind == "dim" and q.tensor == v)


def _pname(params: list[Param], kind: str, tensor: str, axis: str | None = None) -> str:
    return next(q.c_name for q in params if q.kind == kind and q.tensor == tensor and q.axis == axis)


def rope_context(p: RopePlan) -> dict[str, Any]:
    params = rope_abi(p)
    arith = arith_name(p.compute, p.compute_storage_rounding)
    tensors = {t.name: t for t in p.inputs}
    first = p.ir.tensor(p.streams[0].src)
    if p.token_layout == "t":
        batch_expr = "(int64_t)1"
        seq_expr = _size_expr(first.role_dim(ir.Role.TOKENS).size, params)
    else:
        batch_expr = _size_expr(first.role_dim(ir.Role.BATCH).size, params)
        seq_expr = _size_expr(first.role_dim(ir.Role.SEQ).size, params)

    def token_offset(tensor: str) -> str:
        if p.token_layout == "t":
            return f"rg_t * {_pname(params, 'stride', tensor, 'token')}"
        return (f"rg_b * {_pname(params, 'stride', tensor, 'batch')} + "
                f"rg_s * {_pname(params, 'stride', tensor, 'seq')}")

    streams = []
    for s in p.streams:
        t = tensors[s.src]
        streams.append(dict(
            out=_pname(params, "out", s.out), src=_pname(params, "in", s.src), rotate=s.rotate,
            src_offset=token_offset(s.src), out_offset=token_offset(s.out),
            src_head=_pname(params, "stride", s.src, "head"), out_head=_pname(params, "stride", s.out, "head"),
            heads=t.real_heads, split=t.unit_split, name=s.out, source=s.src))

    pos = p.positions
    per_token = sum(t.real_heads * p.head_dim * t.dtype.itemsize for t in (tensors[s.src] for s in p.streams))

    def scalar_expr(v) -> str:
        return f"(int64_t){v}" if isinstance(v, int) else _pname(params, "scalar", v)

    a = p.angles
    ctx: dict[str, Any] = dict(
        fn=function_name(p), guard=p.name.upper(), params=params, flags=" ".join(cbuild.PINNED_FLAGS),
        st=p.storage.c_type, arith=arith, ct=arith_c_type(arith),
        load_x=f"rg_load_{p.storage.name}_{arith}", store_y=f"rg_store_{arith}_{p.storage.name}",
        rnd=_round_fn(arith), batch_expr=batch_expr, seq_expr=seq_expr, streams=streams,
        positions_kind=pos.kind.value, symbol_params=[q for q in params if q.kind == "dim"],
        pointer_params=[q for q in params if q.kind in ("in", "out")],
        threads=next(q.c_name for q in params if q.kind == "threads"),
        ids=_pname(params, "in", pos.ids) if pos.ids else "",
        ids_type=tensors[pos.ids].dtype.c_type if pos.ids else "",
        start=scalar_expr(pos.start), pad=_pname(params, "in", pos.pad) if pos.pad else "",
        first_seqlen=scalar_expr(pos.first_seqlen) if pos.first_seqlen is not None else "",
        seqlen=_pname(params, "in", p.sequences) if p.sequences else "",
        nseq=_size_expr(p.ir.tensor(p.sequences).axes[0].size, params) if p.sequences else "",
        sin_negate=p.sin_sign < 0,
        chunk_tokens=max(1, CHUNK_BYTES // max(1, per_token)),
        stream_min_tokens=_stream_min(p.storage, per_token),
    )
    if isinstance(a, TableAnglesPlan):
        cos_t = p.ir.tensor(a.cos)
        ctx.update(angles_kind="table", cos=_pname(params, "in", a.cos), sin=_pname(params, "in", a.sin),
                   load_table=f"rg_load_{a.dtype.name}_{arith}", table_width=a.width,
                   rows_expr="" if a.per_token else _size_expr(cos_t.axes[0].size, params),
                   table_by_position=not a.per_token)
    elif isinstance(a, ExactAngles):
        ctx.update(angles_kind="exact", inv_freq=[c_double(v) for v in a.inv_freq],
                   cos_factor=c_double(a.magnitude), sin_factor=c_double(p.sin_sign * a.magnitude),
                   load_angle=f"rg_load_f64_{arith}", table_by_position=False)
    else:
        assert isinstance(a, GgmlAngles)
        ctx.update(angles_kind="ggml", theta_scale=c_float(a.theta_scale), freq_scale=c_float(a.freq_scale),
                   ramp=[c_float(v) for v in a.ramp], one_minus_ramp=[c_float(v) for v in a.one_minus_ramp],
                   yarn=a.yarn, cos_factor=c_double(a.mscale), sin_factor=c_double(p.sin_sign * a.mscale),
                   load_angle=f"rg_load_f64_{arith}", table_by_position=False)
    ff = getattr(a, "freq_factors", None)
    ctx["ff"] = _pname(params, "in", ff) if ff else ""
    ctx["load_ff"] = ""
    ctx["ff_decl"] = ""
    if ff:
        ff_dtype = tensors[ff].dtype.name
        ctx["ff_decl"] = f", const {tensors[ff].dtype.c_type} *ff"
        ctx["load_ff"] = f"rg_load_{ff_dtype}_{'f64' if ctx['angles_kind'] == 'exact' else 'f32'}"
    return ctx


def rms_product_name(p: RmsNormPlan) -> str:
    return p.product.name


def rms_context(p: RmsNormPlan) -> dict[str, Any]:
    params = rms_abi(p)
    x_t = p.ir.x
    lead = [a.size for a in x_t.axes[:p.axis]]
    rows_expr = " * ".join(_size_expr(v, params) for v in lead) if lead else "(int64_t)1"
    stash = p.stash.name
    product = rms_product_name(p)
    lanes = 8 if stash == "f64" else 16
    # the fast row path (see rmsnorm.c.j2): bf16 roundings without their NaN select, where the
    # rounding is rg_f32_to_bf16 of a float (stash / product f32)
    norm_fast = ("return rg_bits_f32(rg_rms_bf16_carry(v) & 0xffff0000u);"
                 if (p.x.name, stash, product) == ("bf16", "f32", "f32")
                 else f"return rg_load_{p.x.name}_{product}(rg_store_{stash}_{p.x.name}(v));")
    y_fast = ("return (uint16_t)(rg_rms_bf16_carry(v) >> 16);" if (p.y.name, product) == ("bf16", "f32")
              else f"return rg_store_{product}_{p.y.name}(v);")
    fast = "rg_rms_bf16_carry" in norm_fast + y_fast
    padded = p.padded_scale_shape
    stash_eps = p.epsilon_stash
    full_scale = all(st != 0 for st in p.scale_strides) and padded == p.norm_shape
    return dict(
        fn=function_name(p), guard=p.name.upper(), params=params, flags=" ".join(cbuild.PINNED_FLAGS),
        x=params[0].c_name, scale=params[1].c_name, y=params[2].c_name,
        xt=p.x.c_type, scalet=p.scale.c_type, yt=p.y.c_type,
        stash_t=arith_c_type(stash), product_t=arith_c_type(product),
        load_x=f"rg_load_{p.x.name}_{stash}", store_norm=f"rg_store_{stash}_{p.x.name}",
        load_norm=f"rg_load_{p.x.name}_{product}", load_scale=f"rg_load_{p.scale.name}_{product}",
        store_y=f"rg_store_{product}_{p.y.name}",
        epsilon=(c_double(stash_eps) if stash == "f64" else c_float(stash_eps)),
        n_literal=(c_double(float(p.norm_size)) if stash == "f64" else c_float(float(p.norm_size))),
        rows_expr=rows_expr, lanes=lanes, block=lanes * 64, fast=fast, norm_fast=norm_fast, y_fast=y_fast, sqrt_fn="sqrt" if stash == "f64" else "sqrtf", symbol_params=[q for q in params if q.kind == "dim"],
        threads=params[-1].c_name, full_scale=full_scale,
        chunk_rows=max(1, CHUNK_BYTES // max(1, p.norm_size * p.x.itemsize)),
        stream_min_rows=_stream_min(p.y, p.norm_size * p.y.itemsize),
        scale_dims=list(zip(p.norm_shape, p.scale_strides)),
    )


# ---------------------------------------------------------------------------------------------
# the Python side of a call

def _bind(sym: dict[str, int], name: str, a: Any, t) -> np.ndarray:
    """Validate dtype and shape of one input (as the NumPy backend does), binding symbols."""
    if t.rank == 0 and not isinstance(a, np.ndarray):
        a = np.asarray(a)
    if not isinstance(a, np.ndarray):
        raise ValueError(f"{name}: expected a numpy array, got {type(a).__name__}")
    want = t.dtype.np_dtype
    if a.dtype != want:
        raise ValueError(f"{name}: expected dtype {want.name}, got {a.dtype.name}")
    bind_shape(sym, name, a.shape, t.shape)
    return a


_AXIS_NAMES = {ir.Role.TOKENS: "token", ir.Role.BATCH: "batch", ir.Role.SEQ: "seq", ir.Role.HEADS: "head"}


def stride_recipe(op_ir: ir.RopeOp, tensor: str) -> tuple[tuple[int, str, int], ...]:
    """(memory axis, canonical axis name, element multiplier) for a rotated tensor's strides.

    head_dim is always the last memory axis (the checker insists), alone or merged with heads;
    the axis holding it must be contiguous for the kernel to read the tensor in place.
    """
    t = op_ir.tensor(tensor)
    out = []
    for i, axis in enumerate(t.axes):
        if len(axis.parts) == 1:
            if axis.parts[0].role is not ir.Role.HEAD_DIM:
                out.append((i, _AXIS_NAMES[axis.parts[0].role], 1))
        else:   # (heads, head_dim) merged into the last axis
            out.append((i, "head", int(axis.parts[1].size)))
    return tuple(out)


def canonical_strides(recipe, a: np.ndarray) -> dict[str, int] | None:
    """Element strides along token/batch/seq/head, or None when the kernel cannot read `a` in place
    (head_dim not contiguous, or the array misaligned)."""
    item = a.itemsize
    if a.size == 0:   # nothing is read or written; numpy may report any strides for an empty array
        return {name: 0 for _, name, _ in recipe}
    if not a.flags.aligned or (a.strides[-1] != item and a.shape[-1] > 1):
        return None
    st = a.strides
    return {name: (st[i] // item) * mult for i, name, mult in recipe}


@dataclass
class Bound:
    """One call's arguments: a value per ABI parameter (addresses for arrays), the arrays behind the
    pointer parameters (kept alive for the call) and the outputs to return."""

    values: list[int]
    arrays: dict[int, np.ndarray]
    outputs: tuple[np.ndarray, ...]
    given: dict[str, np.ndarray]


class CKernel:
    """A loaded C kernel behind the Python calling convention of every backend.

    Call with the operator's inputs in declaration order; options: threads (default: the cores
    available), out (preallocated output arrays, in output order), inplace (rope: write each output
    over its source and return the sources), check (accepted for compatibility with the NumPy
    backend; the C code always checks positions and sequence lengths).
    """

    def __init__(self, plan: Plan, func: Callable | None, params: list[Param]):
        self.plan = plan
        self.func = func
        self.params = params
        self.inputs = {t.name: t for t in plan.inputs}
        self.names = [t.name for t in plan.inputs]
        self._index = {(q.kind, q.tensor, q.axis): i for i, q in enumerate(params)}
        self._recipes = {}
        if isinstance(plan, RopePlan):
            self._recipes = {s.src: stride_recipe(plan.ir, s.src) for s in plan.streams}

    def __call__(self, *arrays, threads: int | None = None, out=None, inplace: bool = False,
                 check: bool = True) -> tuple[np.ndarray, ...]:
        b = self.bind(*arrays, threads=threads, out=out, inplace=inplace)
        status = int(self.func(*b.values))
        if status != OK:
            self.raise_status(status, b.given)
        return b.outputs

    def bind(self, *arrays, threads: int | None = None, out=None, inplace: bool = False) -> Bound:
        """Validate the inputs and lay out the call, without calling."""
        p = self.plan
        if len(arrays) != len(self.names):
            raise ValueError(f"{p.name}: expected {len(self.names)} inputs ({', '.join(self.names)}), "
                             f"got {len(arrays)}")
        if threads is None:
            threads = cbuild.default_threads()
        if isinstance(threads, bool) or not isinstance(threads, (int, np.integer)) or threads < 1:
            raise ValueError(f"threads must be a positive integer, got {threads!r}")
        if inplace and out is not None:
            raise ValueError("give either out= or inplace=True, not both")
        sym: dict[str, int] = {}
        given = {n: _bind(sym, n, a, self.inputs[n]) for n, a in zip(self.names, arrays)}
        values: list[int] = [0] * len(self.params)
        held: dict[int, np.ndarray] = {}
        if isinstance(p, RopePlan):
            outputs = self._bind_rope(given, values, held, out, inplace)
        else:
            if inplace:
                raise ValueError(f"{p.name}: rmsnorm does not run in place (its output may have another dtype)")
            outputs = self._bind_rms(given, values, held, out)
        # the arrays the kernel will really touch (inputs copied above are fresh memory); outputs the
        # wrapper allocated cannot overlap anything, so the common call skips the test
        if inplace or out is not None:
            aliasing.check({q.tensor: held[i] for i, q in enumerate(self.params) if q.kind == "in"},
                           {q.tensor: held[i] for i, q in enumerate(self.params) if q.kind == "out"},
                           {s.out: s.src for s in p.streams} if isinstance(p, RopePlan) else {})
        for i, q in enumerate(self.params):
            if q.kind == "dim":
                values[i] = sym[q.tensor]
            elif q.kind == "threads":
                values[i] = int(threads)
        return Bound(values, held, tuple(outputs), given)

    def _set(self, values: list[int], key: tuple, v: int) -> None:
        values[self._index[key]] = v

    def _pointer(self, values, held, kind: str, name: str, a: np.ndarray) -> None:
        i = self._index[(kind, name, None)]
        values[i] = a.ctypes.data
        held[i] = a

    def _bind_rope(self, given, values, held, out, inplace: bool) -> list[np.ndarray]:
        p: RopePlan = self.plan
        rotated = {s.src for s in p.streams}
        for name in self.names:
            a = given[name]
            t = self.inputs[name]
            if name in rotated:
                st = canonical_strides(self._recipes[name], a)
                if st is None:
                    if inplace:
                        raise ValueError(f"{name}: cannot rotate in place: its head_dim is not contiguous")
                    # a contiguous array can still be misaligned: np.require copies when it is
                    a = given[name] = np.require(a, requirements="CA")
                    st = canonical_strides(self._recipes[name], a)
                for axis, v in st.items():
                    self._set(values, ("stride", name, axis), v)
            elif t.rank == 0:
                if a.dtype.kind not in "iu":
                    raise ValueError(f"{name}: expected an integer scalar, got dtype {a.dtype.name}")
                self._set(values, ("scalar", name, None), int(a))
                continue
            elif not (a.flags.c_contiguous and a.flags.aligned):
                a = given[name] = np.require(a, requirements="CA")
            self._pointer(values, held, "in", name, a)
        if inplace:
            out = tuple(given[s.src] for s in p.streams)
        outs = _outputs(out, [(s.out, given[s.src]) for s in p.streams])
        for s, o in zip(p.streams, outs):
            st = canonical_strides(self._recipes[s.src], o)
            if st is None:
                raise ValueError(f"out {s.out}: its head_dim must be contiguous (and the array aligned)")
            for axis, v in st.items():
                self._set(values, ("stride", s.out, axis), v)
            self._pointer(values, held, "out", s.out, o)
        return outs

    def _bind_rms(self, given, values, held, out) -> list[np.ndarray]:
        p: RmsNormPlan = self.plan
        for name in self.names:
            a = given[name]
            if not (a.flags.c_contiguous and a.flags.aligned):
                a = given[name] = np.require(a, requirements="CA")
            self._pointer(values, held, "in", name, a)
        x = given[self.names[0]]
        if out is None:
            y = np.empty(x.shape, dtype=p.y.np_dtype)
        else:
            (y,) = _outputs(out, [(p.out, np.empty((0,) * x.ndim, dtype=p.y.np_dtype))], shape=x.shape)
            if not (y.flags.c_contiguous and y.flags.aligned):
                raise ValueError(f"out {p.out}: expected a contiguous array")
        self._pointer(values, held, "out", p.out, y)
        return [y]

    def raise_status(self, status: int, given: dict[str, np.ndarray]):
        """The ValueError for a nonzero status of this kernel."""
        p = self.plan
        if isinstance(p, RopePlan) and status == ESEQUENCES:
            first = p.ir.tensor(p.streams[0].src)
            tokens_axis = next(i for i, ax in enumerate(first.axes) if ax.parts[0].role is ir.Role.TOKENS)
            S = given[first.name].shape[tokens_axis]
            raise ValueError(f"{p.sequences}: sequence lengths must be >= 0 and sum to the {S} packed tokens")
        if isinstance(p, RopePlan) and status == EPOSITION:
            a = p.angles
            rows = given[a.cos].shape[0] if isinstance(a, TableAnglesPlan) else 0
            msg = f"position out of range: the cos/sin tables have {rows} rows"
            if p.positions.ids and given[p.positions.ids].size:
                ids = given[p.positions.ids]
                msg += f", positions span [{int(ids.min())}, {int(ids.max())}]"
            elif p.positions.kind is ir.PositionKind.IN_SEQUENCE:
                msg += f", the longest sequence has {int(given[p.sequences].max())} tokens"
            raise ValueError(msg)
        if isinstance(p, RopePlan) and status == EOVERFLOW:
            raise ValueError(f"position arithmetic overflows int64 ({p.positions.kind.value} positions: start, "
                             f"sequence length, pad and first_seqlen must keep every position within int64)")
        if status == ENOMEM:
            raise MemoryError(f"{p.name}: the C kernel could not allocate its scratch memory")
        raise ValueError(f"{p.name}: the C kernel rejected its arguments (status {status})")


def _outputs(out, like: list[tuple[str, np.ndarray]], shape: tuple[int, ...] | None = None) -> list[np.ndarray]:
    """Freshly allocated outputs shaped like `like`, or the caller's `out` arrays after checks."""
    if out is None:
        return [np.empty(a.shape, dtype=a.dtype) for _, a in like]
    if isinstance(out, np.ndarray):
        out = (out,)
    out = tuple(out)
    if len(out) != len(like):
        raise ValueError(f"out: expected {len(like)} arrays ({', '.join(n for n, _ in like)}), got {len(out)}")
    for (n, a), o in zip(like, out):
        want = a.shape if shape is None else shape
        if not isinstance(o, np.ndarray) or o.dtype != a.dtype or o.shape != want:
            raise ValueError(f"out {n}: expected a {a.dtype.name} array of shape {want}")
        if not o.flags.writeable:
            raise ValueError(f"out {n}: the array is read-only")
    return list(out)


# ---------------------------------------------------------------------------------------------

class CBackend(Backend):
    name = "c"
    folder = "c"
    comment = "//"

    def sources(self, plan: Plan, spec_file: str) -> dict[str, str]:
        ctx = rope_context(plan) if isinstance(plan, RopePlan) else rms_context(plan)
        return {f"{plan.name}.h": self.render_file(plan, "h", spec_file, **ctx),
                f"{plan.name}.c": self.render_file(plan, "c", spec_file, **ctx)}

    def driver_source(self, plan: Plan, spec_file: str) -> dict[str, str]:
        """A standalone test / timing driver (driver.c) for the operator's sources: see templates/c/driver.c.j2."""
        ctx = rope_context(plan) if isinstance(plan, RopePlan) else rms_context(plan)
        return {"driver.c": render("c/driver.c.j2", p=plan, header=self.header(plan, spec_file), **ctx)}

    def unavailable(self) -> str | None:
        try:
            cbuild.check_usable()
        except cbuild.CompilerError as exc:
            return str(exc)
        return None

    def load(self, plan: Plan, sources: dict[str, str]) -> Kernel:
        lib = cbuild.load_library(cbuild.build(sources, plan.name))
        params = abi(plan)
        func = getattr(lib, function_name(plan))
        func.restype = ctypes.c_int
        func.argtypes = [q.ctype for q in params]
        return CKernel(plan, func, params)
