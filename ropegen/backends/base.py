"""What a target is: a small facts class (its name, template folder, comment marker, reserved words)
that renders a plan to files, says whether it can run here, and loads a kernel."""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Callable

import numpy as np

from ropegen.render import provenance, render

if TYPE_CHECKING:   # annotations only: the plans belong to the ops slices
    from ropegen.ops.plan import Plan

Kernel = Callable[..., tuple[np.ndarray, ...]]


class Backend(ABC):
    """One hardware target: a small class plus one folder of templates."""

    name: str            # the --target / backend= word
    folder: str          # templates/<folder>/
    comment: str         # line-comment marker of the generated language
    ready: bool = True   # False while a target is announced but not built
    reserved: frozenset[str] = frozenset()   # words a tensor name may not be (it becomes a parameter)
    run_options: frozenset[str] = frozenset()   # the keyword options a loaded kernel takes

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
