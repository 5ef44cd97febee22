"""The CUDA backend: one .cu file per operator (templates/cuda), compiled for the current device
and run through CuPy.

The Backend class is a backends/gpu.GpuBackend (lower/gpu decides what the templates print,
facts.py how CUDA spells it); `_Module` compiles and caches, `_launcher` makes the launch call,
and runtime/gpu_call.py's runners do the rest of a call on memory.py's DeviceMemory. CuPy is imported only when an operator
runs.
"""
from __future__ import annotations

import atexit
import os
import shutil
import tempfile

import numpy as np

from ropegen.backends.gpu import GpuBackend
from ropegen.backends.cuda import facts, nvrtc
from ropegen.backends.cuda.memory import DeviceMemory
from ropegen.lower.abi import Param
from ropegen.lower.gpu import Launch
from ropegen.runtime import cache

KERNEL = "the CUDA kernel"    # how status messages name it


class CudaBackend(GpuBackend):
    name = "cuda"
    folder = "cuda"
    comment = "//"
    reserved = facts.RESERVED
    facts = facts
    memory = DeviceMemory
    suffix = "cu"
    kernel_word = KERNEL

    def render_extras(self) -> dict:
        return {"cuda": facts}

    def unavailable(self) -> str | None:
        return unavailable()

    def launcher(self, source: str, name: str):
        return _launcher(source, name)


def _arg(prm: Param, value: int):
    """A kernel argument for CuPy: pointers as uint64, integers at their width."""
    if prm.is_pointer:
        return np.uint64(value)
    return np.int32(value) if prm.bits == 32 else np.int64(value)


def _launcher(source: str, name: str):
    """The launch call of one .cu: its kernel `k` on the call's stream (compiled on first use)."""

    def launch(mem: DeviceMemory, k, shape: Launch, values: list) -> None:
        kernel = _Module.get(source, name).get_function(k.name)
        with mem.stream:
            kernel(shape.grid, shape.block, tuple(_arg(prm, v) for prm, v in zip(k.params, values)))
    return launch


def unavailable() -> str | None:
    try:
        import cupy
    except Exception as e:  # noqa: BLE001 - any import failure means: cannot run here
        return f"CuPy is not importable ({type(e).__name__}: {e}); pip install cupy-cuda12x"
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # noqa: BLE001
        return f"no usable CUDA device ({type(e).__name__}: {e})"
    if n < 1:
        return "no CUDA device"
    return None


class _Module:
    """The compiled .cu for the current device: NVRTC from the pip wheel (the compiler CI checks)
    to a cubin for the device's exact architecture, else CuPy's own NVRTC."""

    _cache: dict = {}
    _dir: str | None = None

    @classmethod
    def get(cls, source: str, name: str):
        import cupy
        arch = cupy.cuda.Device().compute_capability
        key = cache.key("cubin", (f"sm_{arch}",), nvrtc.BASE_OPTIONS, {name: source})
        if key not in cls._cache:
            cls._cache[key] = cls._build(source, name, arch, key)
        return cls._cache[key]

    @classmethod
    def _build(cls, source: str, name: str, arch: str, key: str):
        import cupy
        if nvrtc.available() is None:
            try:
                compiled = nvrtc.compile_source(source, f"sm_{arch}", name=name, strict=False)
                if cls._dir is None:
                    cls._dir = tempfile.mkdtemp(prefix="ropegen-cubin-")
                    # Kept while the process lives: CuPy may load a module's cubin again from its path.
                    atexit.register(shutil.rmtree, cls._dir, ignore_errors=True)
                path = os.path.join(cls._dir, f"{name}.{key}.cubin")
                with open(path, "wb") as f:
                    f.write(compiled.binary)
                module = cupy.RawModule(path=path)
                module.get_function(_first_kernel(source))   # loads now: fall back below if it cannot
                return module
            except Exception:  # noqa: BLE001 - e.g. a driver older than the wheel's cubin: let CuPy compile
                pass
        return cupy.RawModule(code=source, options=("--std=c++17",))


def _first_kernel(source: str) -> str:
    return source.split('extern "C" __global__ void', 1)[1].split("(", 1)[0].split()[-1]
