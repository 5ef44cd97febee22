"""The CUDA target: CUDA C++ kernels compiled with NVRTC and launched through CuPy.

facts.py (how CUDA spells types and intrinsics), abi.py (kernel parameter lists), config.py (what
the templates print), backend.py (the Backend class and builds), runner.py (binding and calling),
launch.py (CuPy), nvrtc.py (the pip wheel's compiler); GPU tiling and launch shapes are
lower/gpu.py's, device arrays runtime/arrays.py's. The names below are the target's surface for
tests and tools.
"""
from ropegen.backends.cuda.backend import CudaBackend, _Module, unavailable  # tests patch _Module.get
from ropegen.backends.cuda.config import ERR_POSITION, ERR_SEQUENCES, RmsCfg, RopeCfg, rms_cfg, rope_cfg
from ropegen.backends.cuda.runner import rope_bind, tokens_of
from ropegen.lower.gpu import VECTOR_BYTES, element_map, expand, rms_launch, rope_launch, rope_vector_ok
from ropegen.lower.strides import canonical_strides
from ropegen.runtime.arrays import as_array, from_dlpack_capsule
from ropegen.runtime.host import validate

__all__ = ["ERR_POSITION", "ERR_SEQUENCES", "VECTOR_BYTES", "CudaBackend", "RmsCfg", "RopeCfg", "_Module",
           "as_array", "canonical_strides", "element_map", "expand", "from_dlpack_capsule", "rms_cfg",
           "rms_launch", "rope_bind", "rope_cfg", "rope_launch", "rope_vector_ok", "tokens_of", "unavailable",
           "validate"]
