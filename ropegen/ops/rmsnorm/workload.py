"""An RMSNorm operator as a benchmark workload: inputs of benchmark size, the bytes its output takes,
the bytes one call moves and the dtype column of a result."""
from __future__ import annotations

import numpy as np

from ropegen import ir
from ropegen.ops.common_inputs import resolve
from ropegen.ops.inputs import elements
from ropegen.ops.rmsnorm.plan import RmsNormPlan


def output_bytes(op: ir.RmsNormOp, sizes: dict[str, int]) -> int:
    return elements(resolve(op.x, sizes)) * 8 * len(op.output_names)


def bench_inputs(op: ir.RmsNormOp, sizes: dict[str, int], positions: str,
                 rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Standard normal values (RMSNorm takes no positions)."""
    return {t.name: rng.standard_normal(resolve(t, sizes), dtype=np.float32).astype(t.dtype.np_dtype)
            for t in op.inputs}


def bytes_moved(p: RmsNormPlan, arrays: dict[str, np.ndarray]) -> int:
    """Every input read once (x, scale, the residual), y written once (and h, x's type)."""
    x = arrays[p.x_name]
    moved = sum(arrays[t.name].nbytes for t in p.inputs) + x.size * p.y.itemsize
    return moved + (x.nbytes if p.residual else 0)


def dtype_label(p: RmsNormPlan) -> str:
    """'x' in place, else 'x->y'."""
    return p.x.name if p.x == p.y else f"{p.x.name}->{p.y.name}"
