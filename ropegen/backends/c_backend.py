"""The C backend (placeholder until templates/c exists)."""
from __future__ import annotations

from ..plan import Plan
from .base import Backend, Kernel


class CBackend(Backend):
    name = "c"
    folder = "c"
    comment = "//"
    ready = False

    def sources(self, plan: Plan, spec_file: str) -> dict[str, str]:
        raise NotImplementedError("the C backend is not built yet")

    def unavailable(self) -> str | None:
        return "the C backend is not built yet"

    def load(self, plan: Plan, sources: dict[str, str]) -> Kernel:
        raise NotImplementedError("the C backend is not built yet")
