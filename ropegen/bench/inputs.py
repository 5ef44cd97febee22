"""Benchmark-size inputs and the bytes they cost: symbol sizes by role, valid inputs, the memory a run
needs (checked before anything is allocated) and the bytes one call reads and writes."""
from __future__ import annotations

from typing import Any

import numpy as np

from ropegen import ir
from ropegen.api import Operator
from ropegen.ops.inputs import elements, symbol_roles
from ropegen.ops.plan import RmsNormPlan, RopePlan, TableAnglesPlan
from ropegen.runtime.memory import TooLarge, format_bytes, limit_hint

# sizes for symbols nobody named, by what the symbol stands for (the Llama-3 shapes)
ROLE_DEFAULTS = {"tokens": 4096, "seq": 4096, "batch": 1, "rows": 8192, "sequences": 1, "free": 4096}


def resolve(t: ir.Tensor, sizes: dict[str, int]) -> tuple[int, ...]:
    return tuple(sizes[a.size] if isinstance(a.size, str) else int(a.size) for a in t.axes)


def bench_sizes(op: Operator, sizes: dict[str, int] | None) -> dict[str, int]:
    """Every symbol's size: from `sizes`, else its role's default."""
    return {s: int((sizes or {}).get(s, ROLE_DEFAULTS[r])) for s, r in symbol_roles(op.ir).items()}


def _rope_output_bytes(o: ir.RopeOp, sz: dict[str, int]) -> int:
    return sum(elements(resolve(o.tensor(r.source), sz)) * o.tensor(r.source).dtype.itemsize for r in o.outputs)


def _rmsnorm_output_bytes(o: ir.RmsNormOp, sz: dict[str, int]) -> int:
    return elements(resolve(o.x, sz)) * 8


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
    outputs = _OUTPUT_BYTES[op.kind](o, sz)
    return 4 * (inputs + outputs) + 4 * widest


def require_memory(op: Operator, shape: dict[str, Any], limit: int) -> None:
    """Raise TooLarge (a ValueError) when benchmarking `op` at `shape` needs more than `limit` bytes."""
    need = bench_bytes(op, shape["sizes"])
    if need > limit:
        raise TooLarge(f"shape '{shape['label']}' is too large for {op.name}: it needs about {format_bytes(need)}, "
                       f"over {format_bytes(limit)} ({limit_hint()})")


def _rmsnorm_inputs(o: ir.RmsNormOp, sz: dict[str, int], positions: str,
                    rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {t.name: rng.standard_normal(resolve(t, sz), dtype=np.float32).astype(t.dtype.np_dtype) for t in o.inputs}


def _rope_inputs(o: ir.RopeOp, sz: dict[str, int], positions: str, rng: np.random.Generator) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    first = o.rotated[0]
    if first.role_dim(ir.Role.TOKENS) is not None:
        d = first.role_dim(ir.Role.TOKENS).size
        B, S = 1, (sz[d] if isinstance(d, str) else d)
    else:
        b, s = first.role_dim(ir.Role.BATCH).size, first.role_dim(ir.Role.SEQ).size
        B, S = (sz[b] if isinstance(b, str) else b), (sz[s] if isinstance(s, str) else s)
    rows = None
    if isinstance(o.angles, ir.TableAngles) and o.positions.kind is not ir.PositionKind.TOKEN:
        lead = o.tensor(o.angles.cos).axes[0].size
        rows = sz[lead] if isinstance(lead, str) else int(lead)
    limit = rows if rows is not None else 1 << 20
    pos = o.positions
    if o.sequences:
        t = o.tensor(o.sequences)
        n = resolve(t, sz)[0]
        lens = np.full(n, S // max(n, 1), dtype=np.int64)
        if n:
            lens[-1] += S - int(lens.sum())
        out[o.sequences] = lens.astype(t.dtype.np_dtype)
    if pos.kind is ir.PositionKind.IDS:
        t = o.tensor(pos.ids)
        if positions == "prefill":
            ids = np.tile(np.arange(S, dtype=np.int64) % max(limit, 1), (B, 1))
        else:
            ids = rng.integers(0, max(limit, 1), (B, S))
        out[pos.ids] = ids.reshape(resolve(t, sz)).astype(t.dtype.np_dtype)
    elif pos.kind in (ir.PositionKind.ARANGE, ir.PositionKind.GLM2D):
        start = 0 if positions == "prefill" or rows is not None else int(rng.integers(0, 1 << 16))
        if isinstance(pos.start, str):
            out[pos.start] = np.array(start, dtype=o.tensor(pos.start).dtype.np_dtype)
        if pos.pad:
            out[pos.pad] = np.zeros(B, dtype=o.tensor(pos.pad).dtype.np_dtype)
        if isinstance(pos.first_seqlen, str):
            out[pos.first_seqlen] = np.array(S, dtype=o.tensor(pos.first_seqlen).dtype.np_dtype)
    for t in o.inputs:
        if t.name in out:
            continue
        shape = resolve(t, sz)
        if isinstance(o.angles, ir.ComputedAngles) and t.name == o.angles.freq_factors:
            out[t.name] = rng.uniform(1.0, 4.0, shape).astype(t.dtype.np_dtype)
        elif isinstance(o.angles, ir.TableAngles) and t.name in (o.angles.cos, o.angles.sin):
            out[t.name] = rng.uniform(-1.0, 1.0, shape).astype(t.dtype.np_dtype)
        else:
            out[t.name] = rng.standard_normal(shape, dtype=np.float32).astype(t.dtype.np_dtype)
    return out


def bench_inputs(op: Operator, sizes: dict[str, int] | None = None, positions: str = "random",
                 seed: int = 0) -> dict[str, np.ndarray]:
    """Valid inputs of benchmark size: every symbol sized from `sizes` or its role's default; positions
    0..S-1 per sequence ('prefill') or uniform over the table rows ('random', decode-like)."""
    rng = np.random.default_rng(seed)
    return _INPUTS[op.kind](op.ir, bench_sizes(op, sizes), positions, rng)


def _rmsnorm_bytes_moved(p: RmsNormPlan, arrays: dict[str, np.ndarray]) -> int:
    x = arrays[p.inputs[0].name]
    return x.nbytes + arrays[p.inputs[1].name].nbytes + x.size * p.y.itemsize


def _rope_bytes_moved(p: RopePlan, arrays: dict[str, np.ndarray]) -> int:
    total = 0
    tables = ()
    if isinstance(p.angles, TableAnglesPlan):
        tables = (p.angles.cos, p.angles.sin)
    ntok = arrays[p.streams[0].src].size // (next(t for t in p.inputs if t.name == p.streams[0].src).heads * p.unit)
    for name, a in arrays.items():
        if name in tables and not p.angles.per_token:
            total += min(a.nbytes, ntok * p.n_streams * a.shape[-1] * a.itemsize)
        else:
            total += a.nbytes
    for s in p.streams:
        total += arrays[s.src].nbytes
    return total


def bytes_moved(op: Operator, arrays: dict[str, np.ndarray]) -> int:
    """Bytes read and written by one call: every input once (cos/sin tables: the rows it gathers) and
    every output once."""
    return _BYTES_MOVED[op.kind](op.plan, arrays)


def symbol_sizes(op: Operator, arrays: dict[str, np.ndarray]) -> dict[str, int]:
    """The size each symbol got in `arrays`."""
    out: dict[str, int] = {}
    for t in op.ir.inputs:
        for a, n in zip(t.axes, arrays[t.name].shape):
            if isinstance(a.size, str):
                out.setdefault(a.size, n)
    return out


def _rmsnorm_label(p: RmsNormPlan) -> str:
    return p.x.name if p.x == p.y else f"{p.x.name}->{p.y.name}"


def _rope_label(p: RopePlan) -> str:
    angles = "cache" if isinstance(p.angles, TableAnglesPlan) else "computed"
    return f"{p.storage.name} ({angles})"


def positions_label(op: Operator, positions: str) -> str | None:
    """The positions column of a result: prefill / random where the operator takes positions, else None."""
    return positions if _TAKES_POSITIONS[op.kind] else None


def dtype_label(op: Operator) -> str:
    """The dtype column of a result: rmsnorm 'x->y', rope 'storage (cache | computed)'."""
    return _DTYPE_LABEL[op.kind](op.plan)


# per operator kind: benchmark facts that ropegen.ops.OpKind has no field for yet (one row per kind)
_OUTPUT_BYTES = {"rope": _rope_output_bytes, "rmsnorm": _rmsnorm_output_bytes}
_INPUTS = {"rope": _rope_inputs, "rmsnorm": _rmsnorm_inputs}
_BYTES_MOVED = {"rope": _rope_bytes_moved, "rmsnorm": _rmsnorm_bytes_moved}
_DTYPE_LABEL = {"rope": _rope_label, "rmsnorm": _rmsnorm_label}
_TAKES_POSITIONS = {"rope": True, "rmsnorm": False}
