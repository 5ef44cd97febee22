"""What every backend provides: render a plan to files, say whether it can run here, load it."""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Callable

import numpy as np

from ..plan import Plan
from ..render import provenance, render

Kernel = Callable[..., tuple[np.ndarray, ...]]


class Backend(ABC):
    """One hardware target: a small class plus one folder of templates."""

    name: str            # the --target / backend= word
    folder: str          # templates/<folder>/
    comment: str         # line-comment marker of the generated language
    ready: bool = True   # False while a target is announced but not built

    def template(self, plan: Plan, suffix: str) -> str:
        return f"{self.folder}/{plan.kind}.{suffix}.j2"

    def header(self, plan: Plan, spec_file: str) -> str:
        return provenance(self.comment, spec_file, plan.spec_sha256, plan.name)

    def render_file(self, plan: Plan, suffix: str, spec_file: str, **context) -> str:
        return render(self.template(plan, suffix), p=plan, header=self.header(plan, spec_file), **context)

    @abstractmethod
    def sources(self, plan: Plan, spec_file: str) -> dict[str, str]:
        """File name -> text for one operator."""

    def unavailable(self) -> str | None:
        """None when this backend can run on this machine, else the reason it cannot."""
        return None

    @abstractmethod
    def load(self, plan: Plan, sources: dict[str, str]) -> Kernel:
        """A callable taking the operator's inputs in order and returning its outputs."""
