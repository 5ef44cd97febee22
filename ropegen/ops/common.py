"""What every operator kind's planner shares: how a declared input maps to the canonical view, and
the rule that a planned constant which overflows its type is a spec error (C029)."""
from __future__ import annotations

import math
from dataclasses import dataclass

from ropegen import ir
from ropegen.ir.dtypes import DType
from ropegen.spec.diagnostics import Diagnostic, SpecError


@dataclass(frozen=True)
class TensorPlan:
    """How an input maps to the canonical view [batch, seq, heads, unit] (tokens: batch = 1)."""

    name: str
    dtype: DType
    shape: tuple[ir.Size, ...]     # declared memory shape, symbols unresolved
    rank: int
    heads: int | None              # heads in rotation units (head_dim / unit per real head)
    real_heads: int | None
    unit_split: int                # rotation units per real head
    perm: tuple[int, ...] | None   # axes of the un-merged shape in canonical order (b, s, h, d)
    unmerged: tuple[ir.Size, ...] | None   # shape with a merged (heads, head_dim) axis split


def tensor_plan(t: ir.Tensor, unit: int | None) -> TensorPlan:
    shape = tuple(a.size for a in t.axes)
    heads_dim = t.role_dim(ir.Role.HEADS)
    if heads_dim is None:
        return TensorPlan(t.name, t.dtype, shape, len(shape), None, None, 1, None, None)
    unmerged = tuple(d.size for d in t.dims)
    order = [ir.Role.BATCH, ir.Role.SEQ, ir.Role.TOKENS, ir.Role.HEADS, ir.Role.HEAD_DIM]
    roles = [d.role for d in t.dims]
    perm = tuple(roles.index(r) for r in order if r in roles)
    head_dim = t.role_dim(ir.Role.HEAD_DIM).size
    split = head_dim // unit
    return TensorPlan(t.name, t.dtype, shape, len(shape), heads_dim.size * split, heads_dim.size, split,
                      perm, unmerged)


def check_finite(plan, values: list[float]) -> None:
    bad = [v for v in values if not math.isfinite(v)]
    if bad:
        raise SpecError([Diagnostic("C029", f"operator '{plan.name}': a planned constant overflows its type "
                                    f"({bad[0]!r})", plan.ir.loc,
                                    "check epsilon, magnitude, base and scaling factors")])
