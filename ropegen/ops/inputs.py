"""Random, valid inputs for an operator: sizes for its symbols, positions in range, odd shapes, strides.

The generic part (cases, symbol sizes, memory bounds); what an operator kind needs beyond that is
its slice's inputs module (ops/<kind>/inputs.py), found through the ops registry.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ropegen import ir, ops


@dataclass(frozen=True)
class Case:
    """One input shape family for check: how large the symbolic dims are and how inputs are laid out."""

    label: str
    tokens: int          # packed tokens, or seq length for [batch, seq] layouts
    batch: int
    strided: bool        # rotated inputs are non-contiguous views
    max_position: int


CASES = (
    Case("1 token", 1, 1, False, 16),
    Case("odd 7x3", 7, 3, False, 500),
    Case("33 strided", 33, 2, True, 4096),
)


# ---------------------------------------------------------------------------------------------
# how much memory a case needs (the limit itself lives in memory.py)

def elements(shape) -> int:
    """The number of elements of a shape, as an exact Python int (no int64 overflow)."""
    n = 1
    for s in shape:
        n *= int(s)
    return n


def symbol_bounds(op: ir.Operator, case: "Case") -> dict[str, int]:
    """An upper bound for every symbol's size in make_inputs(op, case, any seed)."""
    out: dict[str, int] = {}
    for sym, role in symbol_roles(op).items():
        if role in ("tokens", "seq"):
            out[sym] = case.tokens
        elif role == "batch":
            out[sym] = case.batch
        elif role == "sequences":
            out[sym] = max(1, case.batch)
        elif role == "indptr":
            out[sym] = max(1, case.batch) + 1
        elif role == "rows":
            # positions stay below max_position + tokens + 128 (decode starts) in every kind; +4 spare rows
            out[sym] = case.max_position + case.tokens + 128 + 5
        else:
            out[sym] = 7 if case.tokens > 1 else 1
    return out


def case_bytes(op: ir.Operator, case: "Case") -> int:
    """About the most memory checking `op` on `case` needs, in bytes, from the declared shapes alone
    (before anything is allocated): every input (rotated inputs twice more when strided), every
    output, and the float64 copies the reference and the comparison make of rotated data (four
    8-byte values per element)."""
    bounds = symbol_bounds(op, case)

    def count(t: ir.Tensor) -> int:
        return elements(bounds[a.size] if isinstance(a.size, str) else a.size for a in t.axes)

    return ops.of(op).case_bytes(op, case, count)


def symbol_roles(op: ir.Operator) -> dict[str, str]:
    """What each symbol stands for: tokens, batch, seq, rows (table rows), sequences, or free."""
    roles: dict[str, str] = {}
    ops.of(op).symbol_roles(op, roles)
    for t in op.inputs:
        for d in t.dims:
            if isinstance(d.size, str):
                roles.setdefault(d.size, "free")
    return roles


def make_inputs(op: ir.Operator, case: Case, seed: int = 0) -> dict[str, np.ndarray]:
    """Inputs (by name) valid for `op`, sized by `case`."""
    rng = np.random.default_rng(seed)
    roles = symbol_roles(op)
    sizes: dict[str, int] = {}
    nseq = max(1, case.batch)
    for sym, role in roles.items():
        if role == "tokens":
            sizes[sym] = case.tokens
        elif role == "batch":
            sizes[sym] = case.batch
        elif role == "seq":
            sizes[sym] = case.tokens
        elif role == "sequences":
            sizes[sym] = nseq
        elif role == "indptr":
            sizes[sym] = nseq + 1
        elif role == "rows":
            sizes[sym] = 0     # decided once positions are known
        else:
            sizes[sym] = int(rng.integers(1, 8)) if case.tokens > 1 else 1
    return ops.of(op).make_inputs(op, case, rng, sizes, roles)
