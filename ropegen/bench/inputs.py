"""Benchmark-size inputs and the bytes they cost: symbol sizes by role, valid inputs, the memory a run
needs (checked before anything is allocated) and the bytes one call reads and writes.

The generic part: what an operator kind draws, its outputs' bytes, the bytes one call moves and its
dtype column are its slice's workload (ops/<kind>/workload.py), found through the ops registry."""
from __future__ import annotations

from typing import Any

import numpy as np

from ropegen import ops
from ropegen.api import Operator
from ropegen.ops.common_inputs import resolve
from ropegen.ops.inputs import elements, symbol_roles
from ropegen.runtime.memory import TooLarge, format_bytes, limit_hint

# sizes for symbols nobody named, by what the symbol stands for (the Llama-3 shapes)
ROLE_DEFAULTS = {"tokens": 4096, "seq": 4096, "batch": 1, "rows": 8192, "sequences": 1, "indptr": 2, "free": 4096}


def bench_sizes(op: Operator, sizes: dict[str, int] | None) -> dict[str, int]:
    """Every symbol's size: from `sizes`, else its role's default."""
    return {s: int((sizes or {}).get(s, ROLE_DEFAULTS[r])) for s, r in symbol_roles(op.ir).items()}


def bench_bytes(op: Operator, sizes: dict[str, int] | None = None) -> int:
    """About the most memory benchmarking `op` at `sizes` needs, from the declared shapes alone (before
    anything is allocated): four times its inputs and outputs (the arrays, the in-place copies, the
    copy yardstick's buffers and the peers' outputs), plus a float32 temporary per input element
    while the inputs are drawn."""
    o = op.ir
    sz = bench_sizes(op, sizes)
    inputs = 0
    widest = 0
    for t in o.inputs:
        n = elements(resolve(t, sz))
        inputs += n * t.dtype.itemsize
        widest = max(widest, n)
    outputs = ops.of(o).output_bytes(o, sz)
    return 4 * (inputs + outputs) + 4 * widest


def require_memory(op: Operator, shape: dict[str, Any], limit: int, reserve: int = 0) -> None:
    """Raise TooLarge (a ValueError) when benchmarking `op` at `shape` needs more than `limit` bytes, with
    `reserve` bytes (the cache-flush buffer) held beside it."""
    need = bench_bytes(op, shape["sizes"]) + reserve
    if need > limit:
        also = f" with the {format_bytes(reserve)} cache-flush buffer" if reserve else ""
        raise TooLarge(f"shape '{shape['label']}' is too large for {op.name}: it needs about {format_bytes(need)}"
                       f"{also}, over {format_bytes(limit)} ({limit_hint()})")


def bench_inputs(op: Operator, sizes: dict[str, int] | None = None, positions: str = "random",
                 seed: int = 0) -> dict[str, np.ndarray]:
    """Valid inputs of benchmark size: every symbol sized from `sizes` or its role's default; positions
    0..S-1 per sequence ('prefill') or uniform over the table rows ('random', decode-like)."""
    rng = np.random.default_rng(seed)
    return ops.of(op.ir).bench_inputs(op.ir, bench_sizes(op, sizes), positions, rng)


def bytes_moved(op: Operator, arrays: dict[str, np.ndarray]) -> int:
    """Bytes read and written by one call: every input once (cos/sin tables: the rows it gathers) and
    every output once."""
    return ops.of(op.plan).bytes_moved(op.plan, arrays)


def symbol_sizes(op: Operator, arrays: dict[str, np.ndarray]) -> dict[str, int]:
    """The size each symbol got in `arrays`."""
    out: dict[str, int] = {}
    for t in op.ir.inputs:
        for a, n in zip(t.axes, arrays[t.name].shape):
            if isinstance(a.size, str):
                out.setdefault(a.size, n)
    return out


def positions_label(op: Operator, positions: str) -> str | None:
    """The positions column of a result: prefill / random where the operator takes positions, else None."""
    return positions if ops.of(op.plan).takes_positions else None


def dtype_label(op: Operator) -> str:
    """The dtype column of a result: rmsnorm 'x->y', rope 'storage (cache | computed)'."""
    return ops.of(op.plan).dtype_label(op.plan)

