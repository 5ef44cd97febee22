"""NumPy arrays on the host calling convention (runtime/host.py): the CPU backends' layout rules, the
host Memory, and a kernel's parameter values straight from NumPy arguments that need nothing but reading.
(Other libraries' host arrays reach it as NumPy views of their memory: runtime/arrays.host_arguments.)

`HostCall(convention, params)` works out once per loaded kernel where each parameter's value comes
from, and remembers per signature (the shapes and strides of the arguments, and where the outputs
come from) what depends on it alone: symbol sizes, canonical strides, output shapes, byte spans.
Per call it reads addresses, alignment, writeability and scalars (`resolve` finds the signature,
`values` does the per-call part; backends/c/call.py's BoundCall reuses both). A call that needs more than
reading its arguments (a copy; a wrong count, dtype or shape; an empty rotated tensor; a misaligned
or read-only array; outputs the caller gave that come near another argument in memory, but an output
given as exactly its own source, which is the call in place) gets None: the caller goes through
Convention.bind, so every check, copy and message stays in one place, and this path only takes calls
that bind accepts unchanged, with its values.
"""
from __future__ import annotations

import ctypes
import sys
from typing import Any, Callable, Sequence

import numpy as np

from ropegen.ir.dtypes import DTYPES, DType
from ropegen.lower.strides import apply, element_strides
from ropegen.runtime import aliasing
from ropegen.runtime.aligned import empty as empty_aligned
from ropegen.runtime.host import DENSE, ROTATED, SCALAR, Convention, Rules

# The layout rules of the CPU backends, so that they take and refuse the same calls: the generated C
# reads rotated tensors in place when head_dim has stride 1, every other input and rmsnorm's output
# densely, and takes rank-0 integers by value; the NumPy backend's out= and inplace= keep the same
# rules (each target adds its own default thread count).
CPU_RULES = Rules(unit_head_dim=True, dense_inputs=True, dense_outputs=True, scalars=True)

# numpy dtype -> ropegen dtype name (a byte-swapped or unknown dtype has none)
_NAMES = {d.np_dtype: d.name for d in DTYPES.values()}


def _address_reader() -> tuple[Callable[[np.ndarray], int], Callable[[np.ndarray], Any]]:
    """How to read an array's data address, as an int and as a ctypes argument. `a.ctypes.data`
    builds a ctypes wrapper (about 1 us, a good part of a decode-size call); CPython keeps NumPy's
    data pointer (PyArray_DATA) right after the object header, so one word is read there instead,
    after checking that on a few arrays. As an argument, that word is handed to ctypes as a c_void_p
    over it (read when the call converts its arguments; the caller holds the array until then)."""
    def slow_arg(a: np.ndarray) -> ctypes.c_void_p:
        return ctypes.c_void_p(a.ctypes.data)
    if sys.implementation.name != "cpython":
        return (lambda a: a.ctypes.data), slow_arg
    word, offset = ctypes.c_void_p.from_address, object.__basicsize__

    def read(a: np.ndarray) -> int:
        return word(id(a) + offset).value or 0

    def arg(a: np.ndarray) -> ctypes.c_void_p:
        return word(id(a) + offset)

    probes = [np.arange(12, dtype=np.int32), np.zeros((3, 4), dtype=np.float64)[1:, ::-2], np.zeros(0)]
    if all(read(a) == a.ctypes.data for a in probes):
        return read, arg
    return (lambda a: a.ctypes.data), slow_arg


address, pointer_arg = _address_reader()


class HostArray:
    """A NumPy array seen through the array protocol (its fields read once)."""

    __slots__ = ("array", "dtype", "shape", "strides")

    def __init__(self, a: np.ndarray):
        self.array = a
        self.shape = a.shape
        self.strides = element_strides(a.strides, a.itemsize, self.shape)
        self.dtype = _NAMES.get(a.dtype)

    @classmethod
    def of(cls, a: np.ndarray) -> HostArray:
        return cls(a)

    @property
    def ptr(self) -> int:
        return address(self.array)

    @property
    def label(self) -> str:
        return self.array.dtype.name

    @property
    def aligned(self) -> bool:
        return bool(self.array.flags.aligned)

    @property
    def writeable(self) -> bool:
        return bool(self.array.flags.writeable)

    @property
    def c_contiguous(self) -> bool:
        return bool(self.array.flags.c_contiguous)

    @property
    def extent(self) -> aliasing.Extent:
        a = self.array
        return aliasing.Extent(address(a), a.shape, a.strides, a.itemsize)


class HostMemory:
    """Arguments and outputs in this process's memory, as NumPy arrays (the C target's memory)."""

    def take(self, name: str, obj: Any, rank: int) -> HostArray:
        if rank == 0 and not isinstance(obj, np.ndarray):
            obj = np.asarray(obj)
        if not isinstance(obj, np.ndarray):
            raise ValueError(f"{name}: expected a numpy array, got {type(obj).__name__}")
        return HostArray.of(obj)

    def dense(self, a: HostArray) -> HostArray:
        # a contiguous array can still be misaligned: np.require copies when it is
        return HostArray.of(np.require(a.array, requirements="CA"))

    def empty(self, shape: tuple[int, ...], dtype: DType) -> HostArray:
        return HostArray.of(empty_aligned(shape, dtype.np_dtype))

    def output(self, obj: Any) -> HostArray | None:
        return HostArray.of(obj) if isinstance(obj, np.ndarray) else None

    def returned(self, a: HostArray) -> np.ndarray:
        return a.array

    def read(self, a: HostArray) -> np.ndarray:
        return a.array


HOST = HostMemory()


# ---------------------------------------------------------------------------------------------
# the fast path

ALLOCATED, GIVEN, IN_PLACE = 0, 1, 2     # where a call's outputs come from (part of its signature)


class HostCall:
    """One kernel's parameter values from NumPy arguments (see the module docstring)."""

    MAX_SIGNATURES = 64     # distinct argument layouts remembered per kernel (a loop repeats one)

    def __init__(self, convention: Convention, params: Sequence):
        self.convention = convention
        plan, rules = convention.plan, convention.rules
        kinds, specs = convention.kinds, convention.specs
        self.n_params = len(params)
        self.inputs = [(t.dtype.np_dtype, t.rank) for t in plan.inputs]
        self.threads = rules.threads
        index = {n: i for i, n in enumerate(convention.names)}
        outs = {o.name: i for i, o in enumerate(specs)}
        self.srcs = [index[o.src] for o in specs]
        self.out_dtypes = [o.dtype.np_dtype for o in specs]
        # which arrays must be aligned this call (the rest of the layout rules is per signature)
        self.aligned = [i for i, k in enumerate(kinds) if (k is ROTATED and rules.unit_head_dim) or k is DENSE]
        self.out_aligned = [j for j, o in enumerate(specs)
                            if (rules.unit_head_dim if o.rotated else rules.dense_outputs)]
        self.addressed = [i for i, k in enumerate(kinds) if k is not SCALAR]   # what aliasing sees too
        # in place here only when no source feeds two outputs (bind words that case itself)
        self.in_place = convention.in_place and len(set(self.srcs)) == len(self.srcs)
        self.usable = all(t.dtype.np_dtype.kind in "iu" for t, k in zip(plan.inputs, kinds) if k is SCALAR)
        self.ptr_in: list[tuple[int, int]] = []        # (parameter, input)
        self.ptr_out: list[tuple[int, int]] = []       # (parameter, output)
        self.scalars: list[tuple[int, int]] = []       # (parameter, input)
        self.thread_params: list[int] = []
        self.shaped: list[tuple[int, tuple]] = []      # (parameter, source): fixed by the signature
        for j, q in enumerate(params):
            kind = q.source[0]
            if kind == "in":
                self.ptr_in.append((j, index[q.source[1]]))
                self.usable &= kinds[index[q.source[1]]] is not SCALAR
            elif kind == "out":
                self.ptr_out.append((j, outs[q.source[1]]))
            elif kind == "scalar":
                self.scalars.append((j, index[q.source[1]]))
            elif kind == "threads":
                self.thread_params.append(j)
            elif kind in ("stride", "axis_stride", "extent", "dim", "zero"):
                self.shaped.append((j, q.source))
            else:   # launch, err, seq_ends: a GPU target's own values
                self.usable = False
        self.signatures: dict[tuple, tuple] = {}

    def __call__(self, arrays: Sequence, threads: Any = None, out: Any = None,
                 inplace: bool = False) -> tuple[list[int], list[np.ndarray], tuple[np.ndarray, ...]] | None:
        """(parameter values, the inputs as read, the outputs), or None: use Convention.bind."""
        found = self.resolve(arrays, threads, out, inplace)
        return None if found is None else self.values(*found)

    def resolve(self, arrays: Sequence, threads: Any = None, out: Any = None,
                inplace: bool = False) -> tuple | None:
        """(inputs as read, outputs given, mode, threads, signature) of a call whose signature this
        path takes, or None. The signature is (parameter template, output shapes, byte spans)."""
        if not self.usable or len(arrays) != len(self.inputs):
            return None
        if self.threads is not None:
            if threads is None:
                threads = self.threads()
            if type(threads) is not int or threads < 1:
                return None
        elif threads is not None and type(threads) is not int:
            return None
        threads = threads or 1
        taken, key = [], []
        for (want, rank), a in zip(self.inputs, arrays):
            if type(a) is not np.ndarray:
                if rank or isinstance(a, np.ndarray):
                    return None
                a = np.asarray(a)
            if a.dtype is not want and a.dtype != want:
                return None
            taken.append(a)
            key.append(a.shape)
            key.append(a.strides)
        mode = ALLOCATED
        if inplace:
            if out is not None or not self.in_place:
                return None
            mode = IN_PLACE
        elif out is not None:
            out = (out,) if type(out) is np.ndarray else out
            if (type(out) is not tuple and type(out) is not list) or len(out) != len(self.out_dtypes):
                return None
            for y, want in zip(out, self.out_dtypes):
                if type(y) is not np.ndarray or (y.dtype is not want and y.dtype != want):
                    return None
                key.append(y.shape)
                key.append(y.strides)
            mode = GIVEN
        key.append(mode)
        sig = self.signatures.get(key := tuple(key))
        if sig is None:     # a signature bind would copy for or refuse is remembered as ()
            sig = self._signature(taken, out, mode) or ()
            if len(self.signatures) >= self.MAX_SIGNATURES:
                self.signatures.clear()
            self.signatures[key] = sig
        if not sig:
            return None
        return taken, out, mode, threads, sig

    def values(self, taken: list[np.ndarray], out: Sequence | None, mode: int, threads: int,
               sig: tuple) -> tuple[list[int], list[np.ndarray], tuple[np.ndarray, ...]] | None:
        """The per-call part: alignment, scalars, addresses, outputs, aliasing; None: use bind."""
        template, out_shapes, spans = sig
        for i in self.aligned:
            if not taken[i].flags.aligned:
                return None
        values = template.copy()
        for j, i in self.scalars:
            values[j] = int(taken[i])
        read = address
        if mode == ALLOCATED:
            for j, i in self.ptr_in:
                values[j] = read(taken[i])
            outputs = tuple([empty_aligned(shape, dtype) for shape, dtype in out_shapes])
            for j, o in self.ptr_out:
                values[j] = read(outputs[o])
        else:
            outputs = tuple([taken[i] for i in self.srcs]) if mode == IN_PLACE else tuple(out)
            for y in outputs:
                if not y.flags.writeable:
                    return None
            for j in self.out_aligned:
                if not outputs[j].flags.aligned:
                    return None
            addrs = [0] * len(taken)
            for i in self.addressed:
                addrs[i] = read(taken[i])
            out_addrs = [addrs[i] for i in self.srcs] if mode == IN_PLACE else [read(y) for y in outputs]
            if not self.apart(spans, addrs, out_addrs, mode == IN_PLACE):
                return None
            for j, i in self.ptr_in:
                values[j] = addrs[i]
            for j, o in self.ptr_out:
                values[j] = out_addrs[o]
        for j in self.thread_params:
            values[j] = threads
        return values, taken, outputs

    def apart(self, spans, addrs: list[int], out_addrs: list[int], in_place: bool) -> bool:
        """The caller's outputs share no byte with each other or with any input but their own
        sources where they are exactly those (in place; given as out=, the outputs the signature lets be
        their sources' very views, at their sources' addresses); anything closer is for aliasing.check
        to judge."""
        in_spans, out_spans, over = spans
        ins = [(addrs[i] + lo, addrs[i] + hi, i) for i, lo, hi in in_spans]
        outs = [(out_addrs[o] + lo, out_addrs[o] + hi, o) for o, lo, hi in out_spans]
        for n, (lo, hi, o) in enumerate(outs):
            for lo2, hi2, _ in outs[n + 1:]:
                if lo2 <= hi and lo <= hi2:
                    return False
            own = self.srcs[o] if in_place or (o in over and out_addrs[o] == addrs[self.srcs[o]]) else -1
            for lo2, hi2, i in ins:
                if i != own and lo2 <= hi and lo <= hi2:
                    return False
        return True

    def _signature(self, taken: list[np.ndarray], out: Sequence | None, mode: int) -> tuple | None:
        """What the arguments' shapes and strides fix: the values of the `shaped` parameters, the
        outputs' shapes and, for outputs the caller gave, every array's byte span from its address;
        None when bind would refuse, copy or special-case them."""
        conv = self.convention
        plan, rules = conv.plan, conv.rules
        sym: dict[str, int] = {}
        strides: dict[str, tuple[int, ...] | None] = {}
        canon: dict[str, dict[str, int]] = {}
        for t, kind, a in zip(plan.inputs, conv.kinds, taken):
            shape, dims = a.shape, t.shape
            if len(shape) != len(dims):
                return None
            for n, d in zip(shape, dims):
                if isinstance(d, int):
                    if n != d:
                        return None
                elif sym.setdefault(d, n) != n:
                    return None
            es = strides[t.name] = element_strides(a.strides, a.itemsize, shape)
            if kind is ROTATED:
                # bind reads an empty one as all-zero strides and copies one it cannot read in place
                if 0 in shape or es is None or (rules.unit_head_dim and es[-1] != 1 and shape[-1] > 1):
                    return None
                canon[t.name] = apply(conv.recipes[t.name], es, shape)
            elif kind is DENSE and not a.flags.c_contiguous:
                return None
        out_shapes, ys = [], []
        for j, o in enumerate(conv.specs):
            shape = taken[self.srcs[j]].shape
            out_shapes.append((shape, o.dtype.np_dtype))
            # a new array is C-contiguous and aligned, as bind allocates it
            y = empty_aligned(shape, o.dtype.np_dtype) if mode == ALLOCATED else \
                taken[self.srcs[j]] if mode == IN_PLACE else out[j]
            ys.append(y)
            if y.shape != shape:
                return None
            es = element_strides(y.strides, y.itemsize, shape)
            if o.rotated:
                if es is None or (rules.unit_head_dim and es[-1] != 1 and shape[-1] > 1):
                    return None
                canon[o.name] = apply(conv.recipes[o.src], es, shape)
            elif rules.dense_outputs and not y.flags.c_contiguous:
                return None
        template = [0] * self.n_params
        for j, source in self.shaped:
            kind = source[0]
            if kind == "stride":
                template[j] = canon[source[1]][source[2]]
            elif kind == "axis_stride":
                es = strides[source[1]]
                if es is None:
                    return None
                template[j] = es[source[2]]
            elif kind == "extent":
                template[j] = taken[conv.names.index(source[1])].shape[source[2]]
            elif kind == "dim":
                template[j] = sym[source[1]]
        spans = None
        if mode != ALLOCATED:
            in_spans = [(i, *_span(taken[i])) for i in self.addressed if taken[i].size]
            out_spans = [(j, *_span(y)) for j, y in enumerate(ys) if y.size]
            # an output whose own elements overlap is for bind to refuse
            if any(aliasing.internal_overlap(_extent(y, 0)) is not False for y in ys):
                return None
            # outputs given (out=) that may be exactly their sources, in place (aliasing.check's rule):
            # written over their source element by element, which no other output reads, with its strides
            over = () if mode != GIVEN else tuple(
                j for j, (o, y) in enumerate(zip(conv.specs, ys))
                if o.over_src and self.srcs.count(self.srcs[j]) == 1 and y.strides == taken[self.srcs[j]].strides)
            spans = (in_spans, out_spans, over)
        return template, out_shapes, spans


def _extent(a: np.ndarray, at: int) -> aliasing.Extent:
    return aliasing.Extent(at, a.shape, a.strides, a.itemsize)


def _span(a: np.ndarray) -> tuple[int, int]:
    """The lowest and highest byte of a non-empty array, from its address (aliasing.Extent.bounds)."""
    return _extent(a, 0).bounds()
