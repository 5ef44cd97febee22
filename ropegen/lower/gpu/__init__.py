"""GPU lowering, target-neutral: every decision a SIMT kernel's shape and signature depend on, for
any GPU target (CUDA today, OpenCL next); the target only spells the result.

tiles.py (a rotation unit cut into tiles of aligned vectors), launch.py (kernel shapes, register
budget, launch grids, the vector-or-scalar test), abi.py (the kernels' parameter lists),
config.py (what a GPU template prints for one plan). Nothing here imports a GPU library.
"""
from ropegen.lower.gpu.config import (CONFIGS, ERR_POSITION, ERR_SEQUENCES, AngleMode, RmsCfg, RopeCfg, Rows,
                                      SinCos, rms_cfg, rope_cfg)
from ropegen.lower.gpu.launch import (Launch, RmsKernel, RopeKernel, head_streams, rms_launch, rms_vector_ok,
                                      rope_launch, rope_vector_ok)
from ropegen.lower.gpu.tiles import VECTOR_BYTES, element_map, expand

__all__ = ["CONFIGS", "ERR_POSITION", "ERR_SEQUENCES", "VECTOR_BYTES", "AngleMode", "Launch", "RmsCfg", "RmsKernel",
           "RopeCfg", "RopeKernel", "Rows", "SinCos", "element_map", "expand", "head_streams", "rms_cfg",
           "rms_launch", "rms_vector_ok", "rope_cfg", "rope_launch", "rope_vector_ok"]
