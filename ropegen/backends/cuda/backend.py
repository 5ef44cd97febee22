"""The CUDA backend: one .cu file per operator (templates/cuda), compiled for the current device
and run through CuPy.

The Backend class renders (config.py decides what the templates print, facts.py how CUDA spells
it); `_Module` builds, the runners (runner.py) call. CuPy is imported only when an operator runs.
"""
from __future__ import annotations

import atexit
import os
import shutil
import tempfile

from ropegen.backends.base import Backend, Kernel
from ropegen.backends.cuda import facts, nvrtc
from ropegen.backends.cuda.config import rms_cfg, rope_cfg
from ropegen.backends.cuda.runner import RmsRunner, RopeRunner
from ropegen.ops.plan import Plan, RopePlan
from ropegen.runtime import cache


class CudaBackend(Backend):
    name = "cuda"
    folder = "cuda"
    comment = "//"
    reserved = facts.RESERVED

    def config(self, plan: Plan):
        return rope_cfg(plan) if isinstance(plan, RopePlan) else rms_cfg(plan)

    def sources(self, plan: Plan, spec_file: str) -> dict[str, str]:
        return {f"{plan.name}.cu": self.render_file(plan, "cu", spec_file, c=self.config(plan), cuda=facts)}

    def unavailable(self) -> str | None:
        return unavailable()

    def load(self, plan: Plan, sources: dict[str, str]) -> Kernel:
        runner = RopeRunner if isinstance(plan, RopePlan) else RmsRunner
        return runner(plan, self.config(plan), sources[f"{plan.name}.cu"], f"{plan.name}.cu", _Module)


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
