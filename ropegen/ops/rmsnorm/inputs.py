"""Random valid RMSNorm inputs, and how much memory checking one needs."""
from __future__ import annotations

import numpy as np

from ropegen import ir
from ropegen.ops.common_inputs import random_floats, strided_copy


def symbol_roles(op: ir.RmsNormOp, roles: dict[str, str]) -> None:
    """Every RMSNorm symbol is free (sized at random)."""


def case_bytes(op: ir.RmsNormOp, case, count) -> int:
    widest = max(t.dtype.itemsize for t in op.inputs)
    total = 0
    for t in op.inputs:
        total += count(t) * t.dtype.itemsize
    n = count(op.x)
    total += n * op.x.dtype.itemsize * (2 if case.strided else 0) + n * (widest + 4 * 8)
    return total


def make_inputs(op: ir.RmsNormOp, case, rng: np.random.Generator, sizes: dict[str, int],
                roles: dict[str, str]) -> dict[str, np.ndarray]:
    out = {}
    for t in op.inputs:
        shape = tuple(sizes[a.size] if isinstance(a.size, str) else a.size for a in t.axes)
        out[t.name] = random_floats(rng, shape, t.dtype)
        if t.name == op.quant_scale:     # fp8: a scale large enough that some values saturate
            out[t.name] = rng.uniform(0.5, 150.0, shape).astype(np.float32)
    if case.strided:
        out[op.x.name] = strided_copy(rng, out[op.x.name])
    return out
