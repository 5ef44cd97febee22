"""The C side of a call: the host convention (runtime/host.py, with runtime/numpy_host.py's fast path
for NumPy arguments) under the C kernels' layout rules, its parameter values handed to the ctypes
function in ABI order. A call validated once (Operator.bind, and op.run's own loop of one signature)
is backends/c/bound.py's BoundCall."""
from __future__ import annotations

import ctypes
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from ropegen.backends.c import build as cbuild
from ropegen.backends.c.bound import BoundCall, raise_status
from ropegen.backends.c.abi import CParam
from ropegen.lower.status import Status
from ropegen.ops.rope.frequency_rows import frequency_rows
from ropegen.runtime import host
from ropegen.runtime.arrays import host_arguments
from ropegen.runtime.numpy_host import CPU_RULES, HOST, HostCall

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

    def __init__(self, plan: Plan, func: Callable | None, params: list[CParam], words: int | None = None):
        self.plan = plan
        self.func = func
        self.words = words      # the address of the words entry point (bound calls in C, fastcall.py)
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
        cache = (threads is None or type(threads) is int) and (out is None or inplace is False)
        if cache:   # a loop of one signature: the call bound for it takes the arrays in one pass
            key = (threads, inplace is True) if out is None else (threads, "out")
            last = self._last.get(key)
            if last is not None:
                if out is not None:     # out= anew each call: in C (BoundCall.passed), or the way below
                    got = last.passed(arrays, out)
                else:
                    c = last.c      # the bound call's per-call part in C (fastcall.py), else its quick()
                    got = c(*arrays) if c is not None else last.quick(arrays)
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
                    bound = BoundCall(self, arrays, threads, out, inplace, False, (found, fast)).forget()
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
        raise_status(self.plan, tuple(given), code, tuple(given.values()))
