"""BoundCall: a C kernel call validated once for one signature of arguments (Operator.bind, and
CKernel.__call__'s loop of one signature). Its per-call part runs in C where it can (fastcall.py),
else here with ready ctypes arguments."""
from __future__ import annotations

import ctypes
from functools import partial
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from ropegen.backends.c import fastcall
from ropegen.lower import status
from ropegen.runtime.aligned import allocator
from ropegen.runtime.numpy_host import ALLOCATED, GIVEN, IN_PLACE, address, pointer_arg

if TYPE_CHECKING:   # annotations only
    from ropegen.backends.c.call import CKernel
    from ropegen.ops.plan import Plan


def raise_status(plan: Plan, names: Sequence[str], code: int, arrays: Sequence[np.ndarray]):
    """CKernel.raise_status without the kernel (a fastcall.Call keeps this: no cycle through C)."""
    given = dict(zip(names, arrays))
    raise status.error(plan, code, {n: a.shape for n, a in given.items()}, given.__getitem__)


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
        self.c = None               # the per-call part in C (fastcall.py), where it can be
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
        # the outputs' signature (out= passed anew with a call must match it)
        self.out_sig = [(np.dtype(dtype), shape, y.strides) for (shape, dtype), y in zip(self.out_shapes, outputs)] \
            if self.mode == GIVEN else []
        self.single = bare and len(outputs) == 1
        self.returned = outputs[0] if self.single else outputs
        # outputs the caller owns: the whole argument tuple is fixed
        self.fixed = tuple(self.args) if self.mode != ALLOCATED else None
        self.given = dict(zip(kern.convention.names, self.arrays))
        # the per-call part in C where it can be (fastcall.py); None: quick() below
        self.values = values
        self.c = fastcall.call_for(self, kern.words, values, partial(raise_status, kern.plan, kern.convention.names))

    def forget(self) -> BoundCall:
        """Drop the bound arrays (the kernel's own cache keeps only the signature): from here on only
        quick() may be called, or passed() where out= was bound."""
        if self.mode == GIVEN and self.c is not None:     # a Call holding no bound output
            kern = self.kern
            self.c = fastcall.call_for(self, kern.words, self.values,
                                       partial(raise_status, kern.plan, kern.convention.names), keep=False)
        self.arrays = self.outputs = self.returned = self.fixed = self.given = None
        self.options = {**self.options, "out": None}
        return self

    def _signature(self, arrays: tuple) -> None:
        # a rank-0 input given as a Python integer was read as np.asarray of it
        self.sig = [(a.dtype, a.shape, a.strides) for a in map(np.asarray, arrays)]

    def __call__(self, *arrays, out=None):
        if arrays or out is not None:
            return self.call(arrays, out)
        if self.c is not None:
            got = self.c(*self.arrays)
            if got is not None:
                return got
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
        got = self.quick(arrays) if out is None else self.passed(arrays, out)
        if got is not None:
            return got
        return self._checked(arrays, out)

    def passed(self, arrays: Sequence, out):
        """A call with out= of the bound signature passed anew, in C (fastcall.c: the outputs checked as
        inputs are, writeable, overlapping nothing); None where that does not take it."""
        if self.c is None or self.mode != GIVEN:
            return None
        outs = (out,) if type(out) is np.ndarray else out
        if type(outs) is not tuple and type(outs) is not list:
            return None
        return self.c(*arrays, *outs)

    def quick(self, arrays: Sequence):
        """The outputs of a call on new input arrays, or None where a check fails or needs more than
        its one pass (scalars, in place, near the bound outputs): _checked then says why or runs it."""
        if self.slow or len(arrays) != self.n or (self.mode == GIVEN and self.outputs is None):
            return None     # (forgotten outputs: op.run's call bound for out= passes them anew, passed())
        if self.c is not None:
            got = self.c(*arrays)
            if got is not None:
                return got
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
