"""Random valid rope inputs: token counts, sequence lengths, positions in range of the tables, and
what each position form draws (named by its row in forms/position.py: `inputs`)."""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from ropegen import ir
from ropegen.ops.common_inputs import random_floats, strided_copy
from ropegen.ops.rope import forms
from ropegen.ops.rope.reference import position_streams   # the definition of the positions


def symbol_roles(op: ir.RopeOp, roles: dict[str, str]) -> None:
    for t in op.rotated:
        for d in t.dims:
            if isinstance(d.size, str) and d.role is not None:
                roles.setdefault(d.size, d.role.value)
    lead = table_lead(op)
    if isinstance(lead, str):
        roles.setdefault(lead, "rows")
    if op.sequences:
        s = op.tensor(op.sequences).axes[0].size
        if isinstance(s, str):
            roles.setdefault(s, "indptr" if op.sequences_indptr else "sequences")
        if op.positions.offsets:
            n = op.tensor(op.positions.offsets).axes[0].size
            if isinstance(n, str):
                roles.setdefault(n, "sequences")


def case_bytes(op: ir.RopeOp, case, count) -> int:
    total = 0
    rotated = {o.source for o in op.outputs}
    for t in op.inputs:
        n = count(t)
        total += n * t.dtype.itemsize * (3 if case.strided and t.name in rotated else 1)
    for o in op.outputs:
        t = op.tensor(o.source)
        total += count(t) * (t.dtype.itemsize + 4 * 8)
    return total


def batch_seq(op: ir.RopeOp, sizes: dict[str, int]) -> tuple[int, int]:
    """B and S of the rotated tensors' token dims at `sizes` (packed tokens are one batch row)."""
    first = op.rotated[0]
    if first.role_dim(ir.Role.TOKENS) is not None:
        d = first.role_dim(ir.Role.TOKENS).size
        return 1, sizes[d] if isinstance(d, str) else d
    b, s = first.role_dim(ir.Role.BATCH).size, first.role_dim(ir.Role.SEQ).size
    return (sizes[b] if isinstance(b, str) else b), (sizes[s] if isinstance(s, str) else s)


def table_lead(op: ir.RopeOp) -> ir.Size | None:
    """The size of the cos/sin tables' row axis when their rows are positions, else None."""
    if forms.angles_of(op.angles).tables and not forms.position_of(op.positions).per_token:
        return op.tensor(op.angles.cos).axes[0].size
    return None


def draw_ids(op: ir.RopeOp, case, rng, B: int, S: int, sizes: dict, arrays: dict, table_rows: int | None) -> int:
    """Position ids below the table's fixed row count; returns the rows they need."""
    pos = op.positions
    t = op.tensor(pos.ids)
    hi = case.max_position if table_rows is None else min(case.max_position, table_rows)
    ids = rng.integers(0, hi, (B, S)).astype(t.dtype.np_dtype)
    arrays[pos.ids] = ids.reshape(tuple(sizes.get(a.size, a.size) if isinstance(a.size, str) else a.size
                                        for a in t.axes))
    return int(ids.max()) + 1 if ids.size else 1


def draw_mrope(op: ir.RopeOp, case, rng, B: int, S: int, sizes: dict, arrays: dict, table_rows: int | None) -> int:
    """Per-section positions (temporal, height, width): independent draws below the table's rows."""
    pos = op.positions
    t = op.tensor(pos.ids)
    hi = case.max_position if table_rows is None else min(case.max_position, table_rows)
    ids = rng.integers(0, hi, (len(pos.sections), B, S)).astype(t.dtype.np_dtype)
    arrays[pos.ids] = ids.reshape(tuple(sizes.get(a.size, a.size) if isinstance(a.size, str) else a.size
                                        for a in t.axes))
    return int(ids.max()) + 1 if ids.size else 1


def draw_offsets(op: ir.RopeOp, case, rng, B: int, S: int, sizes: dict, arrays: dict, table_rows) -> int:
    """in_sequence(start = OFFSETS): an offset per sequence, the longest sequence still inside the table."""
    lens = np.asarray(arrays[op.sequences]).astype(np.int64)
    if op.sequences_indptr:
        lens = np.diff(lens)
    longest = int(lens.max()) if lens.size else 0
    if not op.positions.offsets:
        return max(1, longest)
    t = op.tensor(op.positions.offsets)
    hi = case.max_position if table_rows is None else max(1, min(case.max_position, table_rows - longest))
    offs = rng.integers(0, hi, lens.size).astype(t.dtype.np_dtype)
    arrays[op.positions.offsets] = offs
    return max(1, max((int(o) + int(n) for o, n in zip(offs, lens)), default=1))


def draw_arange(op: ir.RopeOp, case, rng, B: int, S: int, sizes: dict, arrays: dict, table_rows) -> int:
    start = int(rng.integers(0, case.max_position))
    pad_hi = 8
    if forms.angles_of(op.angles).tables:
        pad_hi = min(pad_hi, start + 1)   # table rows are indexed: keep start + s - pad >= 0
    return _offsets(op, rng, B, S, arrays, start, None, pad_hi)


def draw_glm2d(op: ir.RopeOp, case, rng, B: int, S: int, sizes: dict, arrays: dict, table_rows) -> int:
    prefill = rng.random() < 0.5
    # GLM prompts hold at least [gMASK] and BOS: first_seqlen >= 2 keeps prompt_len - 2 >= 0
    first_seqlen = max(S, 2) if prefill else int(rng.integers(2, 64))
    start = 0 if prefill else int(rng.integers(0, case.max_position))
    if not prefill:
        start = first_seqlen + int(rng.integers(0, 64))
    return _offsets(op, rng, B, S, arrays, start, first_seqlen, max(1, min(first_seqlen - 1, 8)))


def _offsets(op: ir.RopeOp, rng, B: int, S: int, arrays: dict, start: int, first_seqlen: int | None,
             pad_hi: int) -> int:
    """The scalar and pad inputs of an offset form; returns the table rows its positions need."""
    pos = op.positions
    if isinstance(pos.start, str):
        arrays[pos.start] = np.array(start, dtype=op.tensor(pos.start).dtype.np_dtype)
    if pos.pad:
        arrays[pos.pad] = rng.integers(0, pad_hi, B).astype(op.tensor(pos.pad).dtype.np_dtype)
    if isinstance(pos.first_seqlen, str):
        arrays[pos.first_seqlen] = np.array(first_seqlen, dtype=op.tensor(pos.first_seqlen).dtype.np_dtype)
    streams = position_streams(op, arrays, B, S)
    return max(int(p.max()) + 1 if p.size else 1 for p in streams)


def length_case(op: ir.RopeOp, case):
    """Frequencies that change at a length (longrope, dynamic_ntk): the cases that draw positions in
    the hundreds draw them up to twice that length instead, so that a check sees both sides."""
    a = op.angles
    if isinstance(a, ir.ComputedAngles) and forms.scaling_of(a.scaling).length_key and case.max_position >= 500:
        return replace(case, max_position=max(case.max_position, 2 * a.scaling.original_max_positions))
    return case


def make_inputs(op: ir.RopeOp, case, rng: np.random.Generator, sizes: dict[str, int],
                roles: dict[str, str]) -> dict[str, np.ndarray]:
    case = length_case(op, case)
    B, S = batch_seq(op, sizes)
    arrays: dict[str, np.ndarray] = {}
    max_rows_needed = 1
    if op.sequences:
        seqt = op.tensor(op.sequences)
        n = sizes[seqt.axes[0].size] if isinstance(seqt.axes[0].size, str) else seqt.axes[0].size
        n -= 1 if op.sequences_indptr else 0     # an indptr has one more entry than sequences
        cuts = np.sort(rng.integers(0, S + 1, n - 1)) if n > 1 else np.array([], dtype=np.int64)
        lens = np.diff(np.concatenate([[0], cuts, [S]])).astype(seqt.dtype.np_dtype)
        arrays[op.sequences] = np.concatenate([[0], np.cumsum(lens)]).astype(seqt.dtype.np_dtype) \
            if op.sequences_indptr else lens
        max_rows_needed = max(1, int(lens.max()) if lens.size else 1)
    angles = forms.angles_of(op.angles)
    position = forms.position_of(op.positions)
    lead = table_lead(op)
    table_rows = lead if isinstance(lead, int) else None  # a fixed row count bounds the positions drawn
    if position.inputs is not None:
        max_rows_needed = globals()[position.inputs](op, case, rng, B, S, sizes, arrays, table_rows)
    for sym, role in roles.items():
        if role == "rows":
            sizes[sym] = max_rows_needed + int(rng.integers(0, 5))
    ranges = angles.value_ranges(op.angles)
    for name in op.quant_scales:     # fp8 scales: large enough that some values saturate
        ranges[name] = (0.5, 150.0)
    for t in op.inputs:
        if t.name in arrays:
            continue
        shape = tuple(sizes[a.size] if isinstance(a.size, str) else a.size for a in t.axes)
        if t.name in ranges:
            arrays[t.name] = rng.uniform(*ranges[t.name], shape).astype(t.dtype.np_dtype)
        else:
            a = random_floats(rng, shape, t.dtype)
            arrays[t.name] = strided_copy(rng, a) if case.strided else a
    return arrays
