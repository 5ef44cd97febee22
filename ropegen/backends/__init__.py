"""The registry of hardware targets: adding one means one class here plus one template folder."""
from __future__ import annotations

from ropegen.backends.base import Backend
from ropegen.backends.c.backend import CBackend
from ropegen.backends.cuda.backend import CudaBackend
from ropegen.backends.numpy import NumpyBackend
from ropegen.backends.opencl.backend import OpenCLBackend

BACKENDS: tuple[Backend, ...] = (NumpyBackend(), CBackend(), CudaBackend(), OpenCLBackend())


def names() -> tuple[str, ...]:
    return tuple(b.name for b in BACKENDS)


# the keywords of the Python call (`op.run(q, k, backend=..., out=...)`): an input may be passed by
# name, so a tensor named like one would be ambiguous
CALL_WORDS = frozenset({"backend", "check"})


def reserved_words() -> frozenset[str]:
    """Identifiers the spec checker refuses for tensor names: the union of every target's own, and
    the keywords of the Python call (every target's run options)."""
    return frozenset().union(CALL_WORDS, *(b.reserved | b.run_options for b in BACKENDS))


def get(name: str) -> Backend:
    for b in BACKENDS:
        if b.name == name:
            return b
    raise KeyError(name)
