"""The one host calling convention of compiled kernels: from a call's arguments to the value of
every kernel parameter, and from a kernel's status back to an exception.

Every target's call layer goes through these entry points, in this order:

    conv = Convention(plan, rules)               once per loaded kernel (per-plan facts)
    call = conv.bind(memory, arrays, threads=, out=, inplace=)      (or bind(plan, memory, rules, ...))
        the input count; threads; out= xor inplace; each input's dtype and shape, binding the
        size symbols (`validate`, the NumPy backend's messages); the layout rules of the target
        (`Rules`: copy or refuse what its kernels cannot read in place); canonical b/s/h/d strides
        of rotated tensors (lower/strides.py); outputs: inplace (the sources), out= (checked) or
        allocated; the aliasing test (runtime/aliasing.py) whenever the caller supplied outputs.
    call.values(params, launch=..., err=..., seq_ends=...)
        the value of each lower.abi.Param from its source (addresses, strides, sizes, ...); the
        target turns them into its own argument types (ctypes, kernel arguments).
    raise call.error(code, kernel="...")
        the exception for a nonzero status (lower/status.py), with details read from host inputs
        when the Memory can `read` them.

For NumPy arguments, runtime/numpy_host.py's HostCall gives the values of a call that bind would
accept unchanged without building a Call (the decode-size fast path); anything else comes here.

Arrays are seen through a small protocol, so NumPy arrays (numpy_host.HostArray) and device arrays
(runtime/arrays.py's DeviceArray) go through the same code: `ptr`, `shape`, `strides` in elements (None when
not whole elements), `dtype` (a ropegen dtype name; None for a type ropegen lacks), `extent`
(aliasing.Extent) and, where they apply, `aligned`, `writeable`, `label` (numpy's dtype name).
A target supplies a Memory: how it adopts an argument, copies one densely, allocates an output.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Protocol, Sequence

import numpy as np

from ropegen.ir.dtypes import DTYPES, DType
from ropegen.lower import status as _status
from ropegen.lower.strides import apply, recipe, tokens_of
from ropegen.runtime import aliasing

Plan = Any   # a plan of any operator kind (ops/<kind>/plan.py); only its common fields are read


def bind_shape(sym: dict[str, int], name: str, shape: tuple[int, ...], dims: tuple) -> None:
    """Check a shape against declared dims (ints or symbols), binding each symbol on first sight;
    the same rule and messages as the generated NumPy modules."""
    if len(shape) != len(dims):
        raise ValueError(f"{name}: expected rank {len(dims)} {list(dims)}, got shape {tuple(shape)}")
    for i, (n, d) in enumerate(zip(shape, dims)):
        if isinstance(d, int):
            if n != d:
                raise ValueError(f"{name}: dimension {i} is {n}, expected {d}")
        elif d in sym:
            if n != sym[d]:
                raise ValueError(f"{name}: dimension {i} ({d}) is {n}, but {d} = {sym[d]} from an earlier input")
        else:
            sym[d] = n


def label(a) -> str:
    """numpy's name of an array's dtype, for messages."""
    return getattr(a, "label", None) or DTYPES[a.dtype].np_dtype.name


def validate(sym: dict[str, int], name: str, a, want: DType, dims: tuple) -> None:
    """dtype and shape of one input, binding symbolic dims on first sight (as the NumPy backend)."""
    if a.dtype != want.name:
        raise ValueError(f"{name}: expected dtype {want.np_dtype.name}, got {label(a)}")
    bind_shape(sym, name, tuple(a.shape), dims)


# ---------------------------------------------------------------------------------------------
# the protocols: what the convention reads of an array, and asks of a target's memory

class Array(Protocol):
    ptr: int                              # address of element 0
    shape: tuple[int, ...]
    strides: tuple[int, ...] | None       # in elements; None when not whole elements
    dtype: str | None                     # ropegen dtype name; None for a type ropegen has no row for

    @property
    def extent(self) -> aliasing.Extent: ...
    # optional (default True / numpy's name from DTYPES): aligned, writeable, c_contiguous, label


class Memory(Protocol):
    def take(self, name: str, obj: Any, rank: int) -> Array:
        """Adopt one input argument (a ValueError naming `name` when it cannot)."""

    def dense(self, a: Array) -> Array:
        """A C-contiguous, aligned copy of `a` (only called under Rules that ask for one)."""

    def empty(self, shape: tuple[int, ...], dtype: DType) -> Array:
        """A new C-contiguous output."""

    def output(self, obj: Any) -> Array | None:
        """A caller's out= array, or None when `obj` is not an array of this memory."""

    def returned(self, a: Array) -> Any:
        """What the call hands back for output `a` (the caller's own object when in place)."""
    # optional: read(a) -> np.ndarray, the values of a small input on the host (rank-0 scalars
    # under Rules.scalars, and the details of status messages)


# ---------------------------------------------------------------------------------------------
# the convention

@dataclass(frozen=True)
class Rules:
    """The layout facts of a target's kernels that the convention enforces."""

    unit_head_dim: bool = False   # rotated tensors: head_dim at stride 1 and aligned, else copied
    #                               (refused in place, and for out= arrays)
    dense_inputs: bool = False    # other array inputs C-contiguous and aligned, else copied
    dense_outputs: bool = False   # non-rotated outputs (rmsnorm's y) C-contiguous and aligned
    scalars: bool = False         # rank-0 inputs are integers passed by value ("scalar" sources)
    threads: Callable[[], int] | None = None   # the default thread count (None: no threads option)


@dataclass
class Call:
    """One validated call: the arrays the kernel will touch, its outputs, and what the parameter
    sources of lower/abi.py name."""

    plan: Plan
    memory: Any
    inputs: dict[str, Any]                 # by input name, after any copy (scalars included)
    outputs: dict[str, Any]                # by output name
    sym: dict[str, int]
    strides: dict[str, dict[str, int]]     # canonical b/s/h/d of rotated inputs and outputs
    scalars: dict[str, int] = field(default_factory=dict)
    threads: int = 1

    @property
    def shapes(self) -> dict[str, tuple[int, ...]]:
        return {n: tuple(a.shape) for n, a in self.inputs.items()}

    def tokens(self) -> tuple[int, int]:
        """(B, S) of this call (RoPE)."""
        return tokens_of(self.plan, self.shapes)

    def returned(self) -> tuple:
        return tuple(self.memory.returned(o) for o in self.outputs.values())

    def value(self, source: tuple, extra: Mapping[str, Any]) -> int:
        kind = source[0]
        if kind == "in":
            return self.inputs[source[1]].ptr
        if kind == "out":
            return self.outputs[source[1]].ptr
        if kind == "stride":
            return self.strides[source[1]][source[2]]
        if kind == "axis_stride":
            return self.inputs[source[1]].strides[source[2]]
        if kind == "extent":
            return self.inputs[source[1]].shape[source[2]]
        if kind == "dim":
            return self.sym[source[1]]
        if kind == "scalar":
            return self.scalars[source[1]]
        if kind == "threads":
            return self.threads
        if kind == "zero":
            return 0
        if kind == "launch":
            return extra["launch"][source[1]]
        return extra[kind]   # err, seq_ends, freq: addresses the target allocated

    def values(self, params: Sequence, **extra) -> list[int]:
        """The value of every parameter, in order; `extra` gives launch={key: value}, err=, seq_ends=,
        freq=."""
        return [int(self.value(q.source, extra)) for q in params]

    def error(self, code: int, kernel: str = "the C kernel") -> Exception:
        """The exception for a nonzero status, with details read from host inputs."""
        read = getattr(self.memory, "read", None)
        return _status.error(self.plan, code, self.shapes,
                             (lambda n: read(self.inputs[n])) if read else None, kernel)


@dataclass(frozen=True)
class Output:
    """One output of an operator as the convention sees it."""

    name: str
    src: str              # the input whose shape it has
    dtype: DType
    over_src: bool        # it may be written over src, element by element (in place)
    rotated: bool         # src and it are indexed [b, s, h, d] (canonical strides); it may be written
    #                       in place over src, element by element


def _rope_outputs(p) -> list[Output]:
    dtypes = {t.name: t.dtype for t in p.inputs}
    # fp8 outputs have another type than their sources: never written over them
    return [Output(s.out, s.src, p.out_dtype or dtypes[s.src], p.out_dtype is None, True) for s in p.streams]


def _rmsnorm_outputs(p) -> list[Output]:
    # y over x when their types agree; h = x + residual over the residual (vLLM's fused_add_rms_norm)
    outs = [Output(p.out, p.x_name, p.y, p.y == p.x, False)]
    if p.residual:
        outs.append(Output(p.sum_output, p.residual, p.x, True, False))
    return outs


# Per operator kind (the plan's `.kind` word): its outputs. (A candidate for an ops.OpKind field.)
OUTPUTS: dict[str, Callable[[Plan], list[Output]]] = {"rope": _rope_outputs, "rmsnorm": _rmsnorm_outputs}


def writes_in_place(plan: Plan) -> bool:
    """Whether every output of the plan may be written over its source (what inplace=True binds)."""
    return all(o.over_src for o in OUTPUTS[plan.kind](plan))


def in_place_sources(plan: Plan) -> frozenset[str]:
    """The inputs an in-place call writes over (its outputs' sources)."""
    return frozenset(o.src for o in OUTPUTS[plan.kind](plan) if o.over_src)


def _unit_head_dim(a) -> bool:
    """The kernel can read a rotated tensor in place: head_dim at stride 1 and the array aligned."""
    shape, strides = tuple(a.shape), a.strides
    if 0 in shape:
        return True
    if strides is None or not getattr(a, "aligned", True):
        return False
    return strides[-1] == 1 or shape[-1] <= 1


def _dense(a) -> bool:
    return bool(getattr(a, "c_contiguous", True)) and bool(getattr(a, "aligned", True))


# How Convention.bind treats each input (Convention.kinds), decided once per kernel.
ROTATED, SCALAR, DENSE, PLAIN = "rotated", "scalar", "dense", "plain"


class Convention:
    """The convention for one plan under one target's Rules, worked out once per loaded kernel."""

    def __init__(self, plan: Plan, rules: Rules):
        self.plan, self.rules = plan, rules
        self.names = [t.name for t in plan.inputs]
        self.specs = OUTPUTS[plan.kind](plan)
        self.in_place = writes_in_place(plan)
        self.sources = {o.name: o.src for o in self.specs if o.over_src}
        self.recipes = {o.src: recipe(plan.ir.tensor(o.src), plan.token_layout) for o in self.specs if o.rotated}
        self.kinds = [ROTATED if t.name in self.recipes else SCALAR if rules.scalars and t.rank == 0
                      else DENSE if rules.dense_inputs else PLAIN for t in plan.inputs]

    def bind(self, memory, arrays: Sequence, *, threads: int | None = None, out=None,
             inplace: bool = False) -> Call:
        """Validate one call's arguments and lay out its memory (see the module docstring)."""
        plan, rules, names = self.plan, self.rules, self.names
        if len(arrays) != len(names):
            raise ValueError(f"{plan.name}: expected {len(names)} inputs ({', '.join(names)}), got {len(arrays)}")
        if rules.threads is not None:
            if threads is None:
                threads = rules.threads()
            if isinstance(threads, bool) or not isinstance(threads, (int, np.integer)) or threads < 1:
                raise ValueError(f"threads must be a positive integer, got {threads!r}")
        if inplace and out is not None:
            raise ValueError("give either out= or inplace=True, not both")
        sym: dict[str, int] = {}
        given: dict[str, Any] = {}
        for t, obj in zip(plan.inputs, arrays):
            given[t.name] = a = memory.take(t.name, obj, t.rank)
            validate(sym, t.name, a, t.dtype, t.shape)
        if inplace and not self.in_place:
            raise ValueError(f"{plan.name}: cannot run in place: an output's dtype differs from its source's")
        call = Call(plan, memory, given, {}, sym, {}, threads=int(threads or 1))
        for name, kind in zip(names, self.kinds):
            a = given[name]
            if kind is ROTATED:
                if rules.unit_head_dim and not _unit_head_dim(a):
                    if inplace:
                        raise ValueError(f"{name}: cannot rotate in place: its head_dim is not contiguous")
                    a = given[name] = memory.dense(a)
                call.strides[name] = apply(self.recipes[name], a.strides, a.shape)
            elif kind is SCALAR:
                value = memory.read(a)
                if value.dtype.kind not in "iu":
                    raise ValueError(f"{name}: expected an integer scalar, got dtype {value.dtype.name}")
                call.scalars[name] = int(value)
            elif kind is DENSE and not _dense(a):
                if inplace and name in self.sources.values():
                    raise ValueError(f"{name}: cannot write in place: the array is not contiguous (and aligned)")
                given[name] = memory.dense(a)
        specs = self.specs
        if inplace:
            call.outputs = {o.name: _writeable(o.name, given[o.src]) for o in specs}
        elif out is None:
            call.outputs = {o.name: memory.empty(tuple(given[o.src].shape), o.dtype) for o in specs}
        else:
            call.outputs = _given_outputs(memory, out, specs, given)
        for o in specs:
            y = call.outputs[o.name]
            if o.rotated:
                if rules.unit_head_dim and not _unit_head_dim(y):
                    raise ValueError(f"out {o.name}: its head_dim must be contiguous (and the array aligned)")
                call.strides[o.name] = apply(self.recipes[o.src], y.strides, y.shape)
            elif rules.dense_outputs and not _dense(y):
                raise ValueError(f"out {o.name}: expected a contiguous array")
        # outputs the convention allocated cannot overlap anything, so the common call skips the test
        if inplace or out is not None:
            aliasing.check({n: a.extent for n, a in given.items() if n not in call.scalars},
                           {o: y.extent for o, y in call.outputs.items()}, self.sources)
        return call


def bind(plan: Plan, memory, rules: Rules, arrays: Sequence, **options) -> Call:
    """Convention(plan, rules).bind(memory, arrays, **options), for a one-off call."""
    return Convention(plan, rules).bind(memory, arrays, **options)


def _given_outputs(memory, out, specs: list[Output], given) -> dict[str, Any]:
    """The caller's out= arrays, after checks: how many, dtype, shape, writeable."""
    if memory.output(out) is not None:
        out = (out,)
    out = tuple(out)
    if len(out) != len(specs):
        raise ValueError(f"out: expected {len(specs)} arrays ({', '.join(o.name for o in specs)}), got {len(out)}")
    outputs = {}
    for o, obj in zip(specs, out):
        want = tuple(given[o.src].shape)
        y = memory.output(obj)
        if y is None or y.dtype != o.dtype.name or tuple(y.shape) != want:
            raise ValueError(f"out {o.name}: expected a {o.dtype.np_dtype.name} array of shape {want}")
        outputs[o.name] = _writeable(o.name, y)
    return outputs


def _writeable(name: str, y):
    if not getattr(y, "writeable", True):
        raise ValueError(f"out {name}: the array is read-only")
    return y
