"""The CUDA backend: one .cu file per operator (templates/cuda), compiled for the current device
and run through CuPy.

The Backend class is a backends/gpu.GpuBackend (lower/gpu decides what the templates print,
facts.py how CUDA spells it); `_Module` compiles and caches, `_Launcher` makes the launch call on
the call's stream (and prepares it once for the runners' quick path), and runtime/gpu_call.py's
runners do the rest of a call on memory.py's DeviceMemory. CuPy is imported only when an operator
runs.
"""
from __future__ import annotations

import atexit
import os
import re
import shutil
import tempfile
import warnings

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


class _Launcher:
    """The launch call of one .cu: its kernel `k` on the call's stream. The module is compiled on
    first use and its functions are kept here per device, so a call hashes no source."""

    def __init__(self, source: str, name: str):
        self.source, self.name = source, name
        self.functions: dict[tuple[int, str], object] = {}

    def function(self, device: int, kernel: str):
        f = self.functions.get((device, kernel))
        if f is None:
            f = self.functions[(device, kernel)] = _Module.get(self.source, self.name).get_function(kernel)
        return f

    def __call__(self, mem: DeviceMemory, k, shape: Launch, values: list) -> None:
        kernel = self.function(mem.device, k.name)
        with mem.stream:
            kernel(shape.grid, shape.block, tuple(_arg(prm, v) for prm, v in zip(k.params, values)))

    def prepared(self, k, shape: Launch, values: list, slots: list[tuple[int, int]]):
        """launch(mem, addresses) of the quick path: `values` converted once; per call, parameter i
        of each (i, j) in `slots` gets addresses[j] (the arrays' and the error word's)."""
        args = [_arg(prm, v) for prm, v in zip(k.params, values)]
        grid, block, name, functions, u64 = shape.grid, shape.block, k.name, self.functions, np.uint64

        def launch(mem: DeviceMemory, addresses: list[int]) -> None:
            call = args.copy()       # (a call from another thread fills its own copy)
            for i, j in slots:
                call[i] = u64(addresses[j])
            kernel = functions.get((mem.device, name)) or self.function(mem.device, name)
            if mem.current:
                kernel(grid, block, tuple(call))
            else:
                with mem.stream:
                    kernel(grid, block, tuple(call))
        return launch


def _launcher(source: str, name: str) -> _Launcher:
    return _Launcher(source, name)


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
    to a cubin for the device's exact architecture, else CuPy's own NVRTC. Cached per process under
    runtime/cache.py's key of the source, the options, the device's architecture and the compiler's
    version (a cubin of another NVRTC or another device is never reused)."""

    _cache: dict = {}
    _dir: str | None = None

    @classmethod
    def get(cls, source: str, name: str):
        import cupy
        arch = cupy.cuda.Device().compute_capability
        key = cache.key("cubin", (f"sm_{arch}", _compiler(cupy)), nvrtc.BASE_OPTIONS, {name: source})
        if key not in cls._cache:
            cls._cache[key] = cls._build(source, name, arch, key)
        return cls._cache[key]

    @classmethod
    def _build(cls, source: str, name: str, arch: str, key: str):
        import cupy
        failed = None
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
            except Exception as e:  # noqa: BLE001 - e.g. a driver older than the wheel's cubin: let CuPy compile
                failed = e
                warnings.warn(f"{name}: the NVRTC wheel's cubin could not be built or loaded for sm_{arch} "
                              f"({type(e).__name__}: {e}); compiling with CuPy's NVRTC instead", RuntimeWarning,
                              stacklevel=3)
        try:   # the same numerics: no contraction into FMAs (nvrtc.BASE_OPTIONS says why)
            return cupy.RawModule(code=source, options=FALLBACK_OPTIONS)
        except Exception as e:
            if failed is None:
                raise
            raise RuntimeError(f"{name}: neither the NVRTC wheel ({type(failed).__name__}: {failed}) nor CuPy "
                               f"({type(e).__name__}: {e}) could compile it for sm_{arch}") from e


# CuPy's compile of the fallback: the front-end options of nvrtc.BASE_OPTIONS (ptxas runs inside CuPy)
FALLBACK_OPTIONS = tuple(o for o in nvrtc.BASE_OPTIONS if not o.startswith("-Xptxas"))


def _compiler(cupy) -> str:
    """The compiler's identity for the cache key: the wheel's NVRTC version, else CuPy's NVRTC."""
    if nvrtc.available() is None:
        return "nvrtc-%d.%d" % nvrtc.version()
    return "cupy-nvrtc-%d.%d" % tuple(cupy.cuda.nvrtc.getVersion())


_KERNEL = re.compile(r'extern "C" __global__ void\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?(\w+)\s*\(')


def _first_kernel(source: str) -> str:
    """The name of the first kernel the .cu defines (its declaration may carry __launch_bounds__)."""
    m = _KERNEL.search(source)
    if m is None:
        raise ValueError("the CUDA source defines no extern \"C\" __global__ kernel")
    return m.group(1)
