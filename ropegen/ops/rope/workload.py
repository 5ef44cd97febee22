"""A rope operator as a benchmark workload: valid inputs of benchmark size (each position form draws
what its row in forms/position.py names here: `bench`), the bytes its outputs take, the bytes one
call moves and the dtype column of a result."""
from __future__ import annotations

import numpy as np

from ropegen import ir
from ropegen.ops.common_inputs import resolve
from ropegen.ops.inputs import elements
from ropegen.ops.rope import forms
from ropegen.ops.rope.inputs import batch_seq, table_lead
from ropegen.ops.rope.plan import RopePlan


def output_bytes(op: ir.RopeOp, sizes: dict[str, int]) -> int:
    return sum(elements(resolve(op.tensor(o.source), sizes)) * op.tensor(o.source).dtype.itemsize
               for o in op.outputs)


def bench_ids(op: ir.RopeOp, sizes: dict[str, int], out: dict, B: int, S: int, rows: int | None,
              positions: str, rng: np.random.Generator) -> None:
    """Position ids: 0..S-1 per row ('prefill') or uniform over the table rows ('random')."""
    limit = rows if rows is not None else 1 << 20
    pos = op.positions
    t = op.tensor(pos.ids)
    if positions == "prefill":
        ids = np.tile(np.arange(S, dtype=np.int64) % max(limit, 1), (B, 1))
    else:
        ids = rng.integers(0, max(limit, 1), (B, S))
    out[pos.ids] = ids.reshape(resolve(t, sizes)).astype(t.dtype.np_dtype)


def bench_offsets(op: ir.RopeOp, sizes: dict[str, int], out: dict, B: int, S: int, rows: int | None,
                  positions: str, rng: np.random.Generator) -> None:
    """An offset form's scalars: start 0 ('prefill', or when table rows bound the positions) or a
    random decode offset, no padding, a first sequence of S tokens."""
    pos = op.positions
    start = 0 if positions == "prefill" or rows is not None else int(rng.integers(0, 1 << 16))
    if isinstance(pos.start, str):
        out[pos.start] = np.array(start, dtype=op.tensor(pos.start).dtype.np_dtype)
    if pos.pad:
        out[pos.pad] = np.zeros(B, dtype=op.tensor(pos.pad).dtype.np_dtype)
    if isinstance(pos.first_seqlen, str):
        out[pos.first_seqlen] = np.array(S, dtype=op.tensor(pos.first_seqlen).dtype.np_dtype)


def bench_sequence_offsets(op: ir.RopeOp, sizes: dict[str, int], out: dict, B: int, S: int, rows: int | None,
                           positions: str, rng: np.random.Generator) -> None:
    """in_sequence(start = OFFSETS): 0 per sequence ('prefill', or when table rows bound the
    positions), else a random decode offset per sequence."""
    pos = op.positions
    if not pos.offsets:
        return
    lens = np.asarray(out[op.sequences]).astype(np.int64)
    n = lens.size - 1 if op.sequences_indptr else lens.size
    t = op.tensor(pos.offsets)
    offs = np.zeros(n, np.int64) if positions == "prefill" or rows is not None else rng.integers(0, 1 << 16, n)
    out[pos.offsets] = offs.astype(t.dtype.np_dtype)


def bench_inputs(op: ir.RopeOp, sizes: dict[str, int], positions: str,
                 rng: np.random.Generator) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    B, S = batch_seq(op, sizes)
    lead = table_lead(op)
    rows = None if lead is None else (sizes[lead] if isinstance(lead, str) else int(lead))
    if op.sequences:
        t = op.tensor(op.sequences)
        n = resolve(t, sizes)[0] - (1 if op.sequences_indptr else 0)
        lens = np.full(n, S // max(n, 1), dtype=np.int64)
        if n:
            lens[-1] += S - int(lens.sum())
        if op.sequences_indptr:
            lens = np.concatenate([[0], np.cumsum(lens)])
        out[op.sequences] = lens.astype(t.dtype.np_dtype)
    draw = forms.position_of(op.positions).bench
    if draw is not None:
        globals()[draw](op, sizes, out, B, S, rows, positions, rng)
    ranges = forms.angles_of(op.angles).value_ranges(op.angles)
    for t in op.inputs:
        if t.name in out:
            continue
        shape = resolve(t, sizes)
        if t.name in ranges:
            out[t.name] = rng.uniform(*ranges[t.name], shape).astype(t.dtype.np_dtype)
        else:
            out[t.name] = rng.standard_normal(shape, dtype=np.float32).astype(t.dtype.np_dtype)
    return out


def bytes_moved(p: RopePlan, arrays: dict[str, np.ndarray]) -> int:
    """Every input once (cos/sin tables indexed by position: the rows it gathers) and every output once."""
    total = 0
    tables = ()
    if forms.angles_of(p.ir.angles).tables:
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


def dtype_label(p: RopePlan) -> str:
    """'storage (cache | computed)'."""
    angles = "cache" if forms.angles_of(p.ir.angles).tables else "computed"
    return f"{p.storage.name} ({angles})"
