"""The CUDA backend (placeholder until templates/cuda exists)."""
from __future__ import annotations

from ..plan import Plan
from .base import Backend, Kernel


class CudaBackend(Backend):
    name = "cuda"
    folder = "cuda"
    comment = "//"
    ready = False

    def sources(self, plan: Plan, spec_file: str) -> dict[str, str]:
        raise NotImplementedError("the CUDA backend is not built yet")

    def unavailable(self) -> str | None:
        return "the CUDA backend is not built yet"

    def load(self, plan: Plan, sources: dict[str, str]) -> Kernel:
        raise NotImplementedError("the CUDA backend is not built yet")
