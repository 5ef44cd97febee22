"""The one status table of generated kernels: code, name, meaning, and the Python exception each
becomes.

The C header prints it as its ROPEGEN_* enum (templates/c/_status.inc.j2), GPU kernels set the
nonzero codes as bits of their error word, and the host convention (runtime/host.py) turns a
code back into the exception `error` builds. What a code says about an operator's own arguments
(positions, sequences) its kind words (OpKind.status_message, in its slice).
"""
from __future__ import annotations

from enum import IntEnum
from typing import Callable, Mapping

import numpy as np


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
    # loaded here: the registry loads the operator slices, whose messages read this module's codes
    from ropegen import ops
    said = ops.of(p).status_message(p, code, shapes, read)   # what the operator's kind says of the code
    if said is not None:
        return said
    if code == Status.ENOMEM:
        return f"{p.name}: {kernel} could not allocate its scratch memory"
    return f"{p.name}: {kernel} rejected its arguments (status {code})"
