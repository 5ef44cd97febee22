"""The registry of hardware targets: adding one means one class here plus one template folder."""
from __future__ import annotations

from .base import Backend
from .c_backend import CBackend
from .cuda_backend import CudaBackend
from .numpy_backend import NumpyBackend

BACKENDS: tuple[Backend, ...] = (NumpyBackend(), CBackend(), CudaBackend())


def names() -> tuple[str, ...]:
    return tuple(b.name for b in BACKENDS)


def get(name: str) -> Backend:
    for b in BACKENDS:
        if b.name == name:
            return b
    raise KeyError(name)
