"""ropegen: compile .rope specs into NumPy, C and CUDA RoPE / RMSNorm kernels, checked against float64."""
from __future__ import annotations

__version__ = "0.1.0"

from ropegen.api import Operator, Program, compile  # noqa: E402

__all__ = ["compile", "Operator", "Program", "__version__"]
