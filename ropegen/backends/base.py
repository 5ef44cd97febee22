"""What every backend provides: render a plan to files, say whether it can run here, load it."""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Callable

import numpy as np

from ropegen.ops.plan import Plan
from ropegen.render import provenance, render

Kernel = Callable[..., tuple[np.ndarray, ...]]


def bind_shape(sym: dict[str, int], name: str, shape: tuple[int, ...], dims: tuple) -> None:
    """Check a shape against declared dims (ints or symbols), binding each symbol on first sight;
    the same rule and messages as the generated NumPy modules."""
    if len(shape) != len(dims):
        raise ValueError(f"{name}: expected rank {len(dims)} {list(dims)}, got shape {tuple(shape)}")
    for i, (n, d) in enumerate(zip(shape, dims)):
        if isinstance(d, int):
            if n != d:
                raise ValueError(f"{name}: dimension {i} is {n}, expected {d}")
        elif d in sym:
            if n != sym[d]:
                raise ValueError(f"{name}: dimension {i} ({d}) is {n}, but {d} = {sym[d]} from an earlier input")
        else:
            sym[d] = n


class Backend(ABC):
    """One hardware target: a small class plus one folder of templates."""

    name: str            # the --target / backend= word
    folder: str          # templates/<folder>/
    comment: str         # line-comment marker of the generated language
    ready: bool = True   # False while a target is announced but not built
    reserved: frozenset[str] = frozenset()   # words a tensor name may not be (it becomes a parameter)

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
