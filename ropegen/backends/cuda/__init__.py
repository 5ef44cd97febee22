"""The CUDA target: CUDA C++ kernels compiled with NVRTC and launched through CuPy.

facts.py (how CUDA spells types, literals, intrinsics and parameter types), backend.py (the Backend
class, the compiled-module cache and the launch call), memory.py (CuPy / PyTorch memory and
streams), nvrtc.py (the pip wheel's compiler), bench.py (its timings). Everything else a GPU target
needs is shared: lower/gpu (tiling, launch shapes, parameter lists, render config),
runtime/gpu_call.py (the runners), runtime/arrays.py (device arrays). The names below are the
target's surface for tests and tools.
"""
from ropegen.backends.cuda import facts
from ropegen.backends.cuda.backend import CudaBackend, _Module, unavailable  # tests patch _Module.get
from ropegen.lower import gpu
from ropegen.lower.gpu import (ERR_POSITION, ERR_SEQUENCES, VECTOR_BYTES, RmsCfg, RopeCfg, element_map, expand,
                               rms_launch, rope_launch, rope_vector_ok)
from ropegen.lower.strides import canonical_strides
from ropegen.runtime.arrays import as_array, from_dlpack_capsule
from ropegen.runtime.gpu_call import rope_bind, tokens_of
from ropegen.runtime.host import validate


def rope_cfg(plan) -> RopeCfg:
    """The CUDA render configuration of a RoPE plan (its parameters spelled by facts.py)."""
    return gpu.rope_cfg(plan, facts.Param)


def rms_cfg(plan) -> RmsCfg:
    """The CUDA render configuration of an RMSNorm plan."""
    return gpu.rms_cfg(plan, facts.Param)

__all__ = ["ERR_POSITION", "ERR_SEQUENCES", "VECTOR_BYTES", "CudaBackend", "RmsCfg", "RopeCfg", "_Module",
           "as_array", "canonical_strides", "element_map", "expand", "from_dlpack_capsule", "rms_cfg",
           "rms_launch", "rope_bind", "rope_cfg", "rope_launch", "rope_vector_ok", "tokens_of", "unavailable",
           "validate"]
