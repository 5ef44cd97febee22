"""The Python side of a C call: validate arrays, allocate outputs, bind the ABI, map status codes to errors."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ropegen import ir
from ropegen.runtime import aliasing
from ropegen.backends.c import build as cbuild
from ropegen.ops.plan import Plan, RmsNormPlan, RopePlan, TableAnglesPlan
from ropegen.backends.base import bind_shape
from ropegen.backends.c.abi import Param


# Status codes of every generated kernel (the header's ROPEGEN_* enum).
OK, EPOSITION, ESEQUENCES, EARG, ENOMEM, EOVERFLOW = 0, 1, 2, 3, 4, 5


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


