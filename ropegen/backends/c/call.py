"""The C side of a call: the host convention (runtime/host.py, with runtime/numpy_host.py's fast path
for NumPy arguments) under the C kernels' layout rules, its parameter values handed to the ctypes
function in ABI order; and BoundCall, a call validated once (Operator.bind, and op.run's own loop of
one signature), whose ctypes arguments are built once."""
from __future__ import annotations

import ctypes
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from ropegen.backends.c import build as cbuild
from ropegen.backends.c.abi import CParam
from ropegen.lower import status
from ropegen.lower.status import Status
from ropegen.ops.rope.frequency_rows import frequency_rows
from ropegen.runtime import host
from ropegen.runtime.aligned import allocator
from ropegen.runtime.arrays import host_arguments
from ropegen.runtime.numpy_host import ALLOCATED, CPU_RULES, HOST, IN_PLACE, HostCall, address, pointer_arg

if TYPE_CHECKING:   # annotations only: the plans belong to the ops slices
    from ropegen.ops.plan import Plan

# Status codes of every generated kernel (the header's ROPEGEN_* enum, from lower/status.py).
OK, EPOSITION, ESEQUENCES, EARG, ENOMEM, EOVERFLOW = (Status.OK, Status.EPOSITION, Status.ESEQUENCES,
                                                      Status.EARG, Status.ENOMEM, Status.EOVERFLOW)

# The host kernels' layout rules (runtime/numpy_host.py), on OpenMP threads.
RULES = replace(CPU_RULES, threads=cbuild.default_threads)


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

    Call with the operator's inputs in declaration order (NumPy arrays; PyTorch CPU tensors and other
    DLPack host arrays are read through NumPy views of their memory, runtime/arrays.py); options:
    threads (default: the cores available), out (preallocated output arrays, in output order), inplace
    (rope: write each output over its source and return the sources), check (accepted for
    compatibility with the NumPy backend; the C code always checks positions and sequence lengths).
    """

    def __init__(self, plan: Plan, func: Callable | None, params: list[CParam]):
        self.plan = plan
        self.func = func
        self.params = params
        self.convention = host.Convention(plan, RULES)
        self.fast = HostCall(self.convention, params)
        self._names = self.convention.names
        self._outs = {o.name: j for j, o in enumerate(self.convention.specs)}
        self._pointers = [(i, q.kind == "in", q.tensor) for i, q in enumerate(params) if q.kind in ("in", "out")]
        # longrope / dynamic_ntk: the frequency rows of each call (HostCall leaves these calls to bind)
        self.rows = frequency_rows(plan)
        self._freq = next((i for i, q in enumerate(params) if q.kind == "freq"), None)
        # per threads option: the last signature seen, and the call bound once it repeats (__call__)
        self._seen: dict[Any, tuple] = {}
        self._last: dict[Any, BoundCall] = {}
        # the same entry point without argtypes, for argument tuples of ready ctypes objects: ctypes
        # then converts nothing (about half the cost of a 15-argument call)
        self.raw = None if func is None else \
            ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.cast(func, ctypes.c_void_p).value)

    def __call__(self, *arrays, threads: int | None = None, out=None, inplace: bool = False,
                 check: bool = True) -> tuple[np.ndarray, ...]:
        cache = out is None and (threads is None or type(threads) is int)
        if cache:   # a loop of one signature: the call bound for it takes the arrays in one pass
            key = (threads, inplace is True)
            last = self._last.get(key)
            if last is not None:
                got = last.quick(arrays)
                if got is not None:
                    return got
        found = self.fast.resolve(arrays, threads, out, inplace)
        fast = None if found is None else self.fast.values(*found)
        if fast is None:
            other = host_arguments(self._names, arrays, out, "c")
            if other is not None:   # PyTorch / DLPack arrays: the call on NumPy views of their memory
                outs = self(*other.arrays, threads=threads, out=other.out, inplace=inplace, check=check)
                return other.returned(outs)
            b = self._bind(arrays, threads, out, inplace)
            code = self.func(*b.values)
            if code:
                self.raise_status(code, b.given)
            return b.outputs
        if cache:
            made = self._last.get(key)
            if found[-1] is self._seen.get(key):
                # the same signature twice in a row: bind it (a loop of mixed signatures never does),
                # once: a bound call whose quick path declines (a scalar input) is not rebuilt per call
                if made is None or made.made_for is not found[-1]:
                    bound = BoundCall(self, arrays, threads, None, inplace, False, (found, fast)).forget()
                    bound.made_for = found[-1]
                    self._last[key] = bound
            else:
                self._seen[key] = found[-1]
        values, inputs, outputs = fast
        code = self.func(*values)    # `inputs` keeps any array made here alive through the call
        if code:
            self.raise_status(code, dict(zip(self._names, inputs)))
        return outputs

    def bind(self, *arrays, threads: int | None = None, out=None, inplace: bool = False) -> Bound:
        """Validate the inputs and lay out the call, without calling."""
        fast = self.fast(arrays, threads, out, inplace)
        if fast is not None:
            values, inputs, outputs = fast
            given = dict(zip(self._names, inputs))
            return Bound(values, {i: given[name] if is_in else outputs[self._outs[name]]
                                  for i, is_in, name in self._pointers}, outputs, given)
        return self._bind(arrays, threads, out, inplace)

    def bound_call(self, *arrays, threads: int | None = None, out=None, inplace: bool = False,
                   bare: bool = False) -> BoundCall:
        """A call validated once for these arrays and options (BoundCall); bare: a single output is
        returned bare, as Operator.run does."""
        return BoundCall(self, arrays, threads, out, inplace, bare)

    def _bind(self, arrays, threads, out, inplace: bool) -> Bound:
        """Convention.bind's way: every check and message, copies, the aliasing test."""
        call = self.convention.bind(HOST, arrays, threads=threads, out=out, inplace=inplace)
        held = {i: (call.inputs if is_in else call.outputs)[name].array for i, is_in, name in self._pointers}
        extra = {}
        if self.rows is not None:
            held[self._freq] = rows = self.rows.for_call(lambda n: call.inputs[n].array, call.shapes)
            extra["freq"] = rows.ctypes.data
        return Bound(call.values(self.params, **extra), held, call.returned(),
                     {n: a.array for n, a in call.inputs.items()})

    def raise_status(self, code: int, given: dict[str, np.ndarray]):
        """Raise the exception for a nonzero status of this kernel (lower/status.py)."""
        raise status.error(self.plan, code, {n: a.shape for n, a in given.items()}, given.__getitem__)


class BoundCall:
    """A kernel call bound to one signature of arguments (Operator.bind).

    `call()` runs the kernel on the bound arrays with a ready tuple of ctypes arguments: nothing is
    looked up or converted. `call(*arrays, out=None)` runs it on new arrays of the same signature (dtype,
    shape and strides of every array, how outputs are made): per call it checks those by equality,
    alignment and writeability, reads the addresses and, where the caller's outputs are written (out=
    or in place), that no output overlaps another array; anything else is a ValueError saying to bind
    again. The kernel checks positions and sequence lengths itself on every call.

    Arguments the kernel cannot read as they are (a layout bind copies, call-dependent frequency rows)
    are bound too, but every call then goes the whole way (CKernel.__call__) with the same checks.
    """

    def __init__(self, kern: CKernel, arrays: Sequence, threads: int | None, out: Any, inplace: bool,
                 bare: bool, done: tuple | None = None):
        self.kern, self.bare = kern, bare
        self.made_for = None        # the HostCall signature op.run's cache bound this for
        self.n = len(arrays)
        self.options = {"threads": threads, "out": out, "inplace": inplace}
        self.name = kern.plan.name
        fast = kern.fast
        if done is not None:    # HostCall's answer for these arguments (CKernel.__call__)
            found, got = done
        else:
            found = fast.resolve(arrays, threads, out, inplace)
            got = None if found is None else fast.values(*found)
        if got is None:      # the whole way: bind's checks and messages now, its copies on every call
            kern._bind(arrays, threads, out, inplace)
            self.arrays = tuple(arrays)
            self.fixed = None
            self.slow = True
            self._signature(self.arrays)
            return
        self.slow = False
        values, taken, outputs = got
        self.arrays = tuple(taken)
        self._signature(self.arrays)
        _, given, self.mode, threads, (self.template, self.out_shapes, self.spans) = found
        self.threads = threads
        # how each output is allocated, decided once: np.empty, or on a line when large (runtime/aligned.py)
        self.allocs = [(allocator(shape, np.dtype(dtype)), shape, np.dtype(dtype)) for shape, dtype in self.out_shapes]
        self.aligned = fast.aligned
        self.ptr_in, self.ptr_out, self.scalars = fast.ptr_in, fast.ptr_out, fast.scalars
        # the bound outputs' bytes (HostCall's spans from the bound addresses): new inputs must keep off
        self.out_bytes = [] if self.mode == ALLOCATED else \
            [(address(outputs[o]) + lo, address(outputs[o]) + hi) for o, lo, hi in self.spans[1]]
        in_spans = {i: (lo, hi) for i, lo, hi in self.spans[0]} if self.mode != ALLOCATED else {}
        ptrs: dict[int, list[int]] = {}
        for j, i in self.ptr_in:
            ptrs.setdefault(i, []).append(j)
        scalar = {i for _, i in self.scalars}
        # per input: its signature, alignment mask, pointer parameters (None: a scalar) and byte span
        self.per_input = [(*self.sig[i], self.sig[i][0].alignment - 1 if i in self.aligned else 0,
                           None if i in scalar else tuple(ptrs.get(i, ())),
                           *in_spans.get(i, (0, -1))) for i in range(len(self.sig))]
        self.ctypes = [q.ctype for q in kern.params]
        self.args = [t(v) for t, v in zip(self.ctypes, values)]
        self.outputs = outputs
        self.single = bare and len(outputs) == 1
        self.returned = outputs[0] if self.single else outputs
        # outputs the caller owns: the whole argument tuple is fixed
        self.fixed = tuple(self.args) if self.mode != ALLOCATED else None
        self.given = dict(zip(kern.convention.names, self.arrays))

    def forget(self) -> BoundCall:
        """Drop the bound arrays (the kernel's own cache keeps only the signature): from here on only
        quick() may be called."""
        self.arrays = self.outputs = self.returned = self.fixed = self.given = None
        self.options = {**self.options, "out": None}
        return self

    def _signature(self, arrays: tuple) -> None:
        # a rank-0 input given as a Python integer was read as np.asarray of it
        self.sig = [(a.dtype, a.shape, a.strides) for a in map(np.asarray, arrays)]

    def __call__(self, *arrays, out=None):
        if arrays or out is not None:
            return self.call(arrays, out)
        if self.fixed is not None:
            code = self.kern.raw(*self.fixed)
            if code:
                self.kern.raise_status(code, self.given)
            return self.returned
        if self.slow:
            return self._whole(self.arrays, self.options["out"])
        outputs = tuple([alloc(shape, dtype) for alloc, shape, dtype in self.allocs])
        args = self.args.copy()
        for j, o in self.ptr_out:
            args[j] = pointer_arg(outputs[o])
        code = self.kern.raw(*args)
        if code:
            self.kern.raise_status(code, self.given)
        return outputs[0] if self.bare and len(outputs) == 1 else outputs

    def call(self, arrays: Sequence, out=None):
        """Run on new arrays of the bound signature (see the class docstring)."""
        if out is None:
            got = self.quick(arrays)
            if got is not None:
                return got
        return self._checked(arrays, out)

    def quick(self, arrays: Sequence):
        """The outputs of a call on new input arrays, or None where a check fails or needs more than
        its one pass (scalars, in place, near the bound outputs): _checked then says why or runs it."""
        if self.slow or len(arrays) != self.n:
            return None
        if self.mode == IN_PLACE:
            return self._in_place(arrays)
        args = self.args.copy()
        near = self.out_bytes
        # one pass per input: the signature by equality, alignment, address, overlap with bound outputs
        for a, (dtype, shape, strides, mask, ptrs, lo, hi) in zip(arrays, self.per_input):
            if type(a) is not np.ndarray or ptrs is None or (a.dtype is not dtype and a.dtype != dtype) or \
                    a.shape != shape or a.strides != strides:
                return None
            at = address(a)
            if at & mask:     # misaligned (the strides are the bound ones, which were aligned)
                return None
            if hi >= 0:
                for olo, ohi in near:
                    if olo <= at + hi and at + lo <= ohi:
                        return None
            for j in ptrs:
                args[j] = ctypes.c_void_p(at)
        if self.mode == ALLOCATED:
            outputs = tuple([alloc(shape, dtype) for alloc, shape, dtype in self.allocs])
            for j, o in self.ptr_out:
                args[j] = pointer_arg(outputs[o])
        else:
            outputs = self.outputs
        code = self.kern.raw(*args)     # `arrays` and `outputs` hold the arrays through the call
        if code:
            self.kern.raise_status(code, dict(zip(self.kern.convention.names, arrays)))
        return outputs[0] if self.single else outputs

    def _in_place(self, arrays: Sequence):
        """quick() in place: each source written is writeable and overlaps no other array."""
        fast = self.kern.fast
        srcs = fast.srcs
        args = self.args.copy()
        addrs = [0] * self.n
        for i, (a, (dtype, shape, strides, mask, ptrs, _, _)) in enumerate(zip(arrays, self.per_input)):
            if type(a) is not np.ndarray or ptrs is None or (a.dtype is not dtype and a.dtype != dtype) or \
                    a.shape != shape or a.strides != strides:
                return None
            addrs[i] = at = address(a)
            if at & mask:
                return None
            for j in ptrs:
                args[j] = ctypes.c_void_p(at)
        outputs = tuple([arrays[i] for i in srcs])
        for y in outputs:
            if not y.flags.writeable:
                return None
        if not fast.apart(self.spans, addrs, [addrs[i] for i in srcs], True):
            return None
        for j, o in self.ptr_out:
            args[j] = ctypes.c_void_p(addrs[srcs[o]])
        code = self.kern.raw(*args)
        if code:
            self.kern.raise_status(code, dict(zip(self.kern.convention.names, arrays)))
        return outputs[0] if self.single else outputs

    def _checked(self, arrays: Sequence, out=None):
        """call() for what its one pass does not take: scalars, out=, in place, a changed array."""
        sig = self.sig
        if len(arrays) != len(sig):
            raise ValueError(f"{self.name}: bound for {len(sig)} inputs, got {len(arrays)}")
        taken = list(arrays)
        for i, a in enumerate(arrays):
            want = sig[i]
            if type(a) is not np.ndarray:
                taken[i] = self._scalar(i, a, want)
            elif (a.dtype is not want[0] and a.dtype != want[0]) or a.shape != want[1] or a.strides != want[2]:
                raise self._changed(i, a, want)
        if self.slow:
            return self._whole(taken, self._outs(out))
        for i in self.aligned:
            if not taken[i].flags.aligned:
                raise self._misaligned(self.kern.convention.names[i])
        return self._other(taken, out)

    def _other(self, taken: Sequence, out):
        """New outputs (out=) or in place over new inputs: HostCall's per-call part with the bound
        signature (alignment, writeability, every overlap), else the whole way (bind's messages)."""
        outs = self._outs(out)
        fast = self.kern.fast
        for j, y in enumerate(() if outs is None else outs):
            if not y.flags.aligned and j in fast.out_aligned:
                raise self._misaligned(self.kern.convention.specs[j].name)
        got = fast.values(list(taken), outs, self.mode, self.threads, (self.template, self.out_shapes, self.spans))
        if got is None:
            return self._whole(taken, outs)
        values, _, outputs = got
        code = self.kern.func(*values)
        if code:
            self.kern.raise_status(code, dict(zip(self.kern.convention.names, taken)))
        return outputs[0] if self.bare and len(outputs) == 1 else outputs

    def _misaligned(self, name: str) -> ValueError:
        return ValueError(f"{self.name}: {name} is not aligned as the bound array was; bind again (op.bind) "
                          f"for this layout")

    def _outs(self, out) -> tuple | None:
        """The outputs of a call on new arrays: new ones of the bound signature, or the bound ones."""
        bound = self.options["out"]
        if out is None:
            return None if bound is None else (self.outputs if not self.slow else bound)
        if bound is None:
            raise ValueError(f"{self.name}: bound without out=; bind again (op.bind) with out= to pass outputs")
        out = (out,) if isinstance(out, np.ndarray) else tuple(out)
        bound = (bound,) if isinstance(bound, np.ndarray) else tuple(bound)
        if len(out) != len(bound):
            raise ValueError(f"{self.name}: bound with {len(bound)} outputs, got {len(out)}")
        for y, b in zip(out, bound):
            if type(y) is not np.ndarray or y.dtype != b.dtype or y.shape != b.shape or y.strides != b.strides:
                raise ValueError(f"{self.name}: an output differs from the bound one (dtype, shape or strides); "
                                 f"bind again (op.bind) for it")
        return out

    def _scalar(self, i: int, a: Any, want) -> np.ndarray:
        """A rank-0 input of the bound dtype given as a Python integer (or an array subclass)."""
        b = np.asarray(a) if type(a) is int else a
        if not isinstance(b, np.ndarray) or b.dtype != want[0] or b.shape != want[1] or b.strides != want[2]:
            raise self._changed(i, b, want)
        return b

    def _changed(self, i: int, a: Any, want) -> ValueError:
        name = self.kern.convention.names[i]
        if not isinstance(a, np.ndarray):
            return ValueError(f"{self.name}: {name}: expected a numpy array, got {type(a).__name__}")
        return ValueError(f"{self.name}: {name} is {a.dtype.name}{list(a.shape)} strides {a.strides}, bound for "
                          f"{want[0].name}{list(want[1])} strides {want[2]}; bind again (op.bind) for a new "
                          f"signature")

    def _whole(self, arrays: Sequence, out):
        o = self.options
        outs = self.kern(*arrays, threads=o["threads"], out=out, inplace=o["inplace"])
        return outs[0] if self.bare and len(outs) == 1 else outs
