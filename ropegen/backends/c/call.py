"""The C side of a call: the host convention (runtime/host.py, with runtime/numpy_host.py's fast path
for NumPy arguments) under the C kernels' layout rules, its parameter values handed to the ctypes
function in ABI order."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import numpy as np

from ropegen.backends.c import build as cbuild
from ropegen.backends.c.abi import CParam
from ropegen.lower import status
from ropegen.lower.status import Status
from ropegen.ops.rope.frequency_rows import frequency_rows
from ropegen.runtime import host
from ropegen.runtime.numpy_host import HOST, HostCall

if TYPE_CHECKING:   # annotations only: the plans belong to the ops slices
    from ropegen.ops.plan import Plan

# Status codes of every generated kernel (the header's ROPEGEN_* enum, from lower/status.py).
OK, EPOSITION, ESEQUENCES, EARG, ENOMEM, EOVERFLOW = (Status.OK, Status.EPOSITION, Status.ESEQUENCES,
                                                      Status.EARG, Status.ENOMEM, Status.EOVERFLOW)

# The generated C reads rotated tensors in place when head_dim has stride 1, every other input and
# rmsnorm's output densely, takes rank-0 integers by value and runs on OpenMP threads.
RULES = host.Rules(unit_head_dim=True, dense_inputs=True, dense_outputs=True, scalars=True,
                   threads=cbuild.default_threads)


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

    def __call__(self, *arrays, threads: int | None = None, out=None, inplace: bool = False,
                 check: bool = True) -> tuple[np.ndarray, ...]:
        fast = self.fast(arrays, threads, out, inplace)
        if fast is None:
            b = self._bind(arrays, threads, out, inplace)
            code = self.func(*b.values)
            if code:
                self.raise_status(code, b.given)
            return b.outputs
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
