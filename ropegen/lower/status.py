"""The one status table of generated kernels: code, name, meaning, and the Python exception each
becomes.

The C header prints it as its ROPEGEN_* enum (templates/c/_status.inc.j2), GPU kernels set the
nonzero codes as bits of their error word, and the host convention (runtime/host.py) turns a
code back into the exception `error` builds.
"""
from __future__ import annotations

from enum import IntEnum
from typing import Callable, Mapping

import numpy as np

from ropegen import ir
from ropegen.lower.strides import tokens_of


class Status(IntEnum):
    """A kernel's return value (C) or one bit of its error word (GPU). Codes never change: compiled
    callers depend on them."""

    OK = 0
    EPOSITION = 1
    ESEQUENCES = 2
    EARG = 3
    ENOMEM = 4
    EOVERFLOW = 5

    @property
    def doc(self) -> str:
        return _DOCS[self]

    @property
    def exception(self) -> type[Exception]:
        """What the host raises for it: a failed allocation is MemoryError, the rest reject arguments."""
        return MemoryError if self is Status.ENOMEM else ValueError


_DOCS = {
    Status.OK: "done",
    Status.EPOSITION: "a position (or table row) is outside the cos/sin tables; nothing written",
    Status.ESEQUENCES: "a sequence length is negative or they do not sum to the tokens; nothing written",
    Status.EARG: "a negative size or a null pointer",
    Status.ENOMEM: "a scratch allocation failed",
    Status.EOVERFLOW: "position arithmetic (start + seq - pad, glm2d offsets) overflows int64; nothing written",
}

STATUSES: tuple[Status, ...] = tuple(Status)

# The codes a GPU kernel can raise in its error word, in the order the host reports them.
ERROR_BITS: tuple[Status, ...] = (Status.ESEQUENCES, Status.EPOSITION)


def from_word(word: int) -> Status:
    """The status an error word stands for: its first set bit in ERROR_BITS order, else OK."""
    return next((s for s in ERROR_BITS if word & s), Status.OK)


def error(plan, code: int, shapes: Mapping[str, tuple[int, ...]],
          read: Callable[[str], np.ndarray] | None = None, kernel: str = "the C kernel") -> Exception:
    """The exception for a nonzero status of `plan`'s kernel. `shapes` are the call's input shapes;
    `read(name)` gives an input's values on the host, for the details a message adds (None: none)."""
    return (Status(code).exception if code in STATUSES else ValueError)(_message(plan, code, shapes, read, kernel))


def _message(p, code: int, shapes, read, kernel: str) -> str:
    rope = p.kind == "rope"
    if rope and code == Status.ESEQUENCES:
        _, S = tokens_of(p, shapes)
        return f"{p.sequences}: sequence lengths must be >= 0 and sum to the {S} packed tokens"
    if rope and code == Status.EPOSITION:
        table = getattr(p.angles, "cos", None)    # only table angles name a cos input
        rows = shapes[table][0] if table else 0
        msg = f"position out of range: the cos/sin tables have {rows} rows"
        if read is not None:
            if p.positions.ids and int(np.prod(shapes[p.positions.ids])):
                ids = read(p.positions.ids)
                msg += f", positions span [{int(ids.min())}, {int(ids.max())}]"
            elif p.positions.kind is ir.PositionKind.IN_SEQUENCE:
                msg += f", the longest sequence has {int(read(p.sequences).max())} tokens"
        return msg
    if rope and code == Status.EOVERFLOW:
        return (f"position arithmetic overflows int64 ({p.positions.kind.value} positions: start, "
                f"sequence length, pad and first_seqlen must keep every position within int64)")
    if code == Status.ENOMEM:
        return f"{p.name}: {kernel} could not allocate its scratch memory"
    return f"{p.name}: {kernel} rejected its arguments (status {code})"
