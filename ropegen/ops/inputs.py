"""Random, valid inputs for an operator: sizes for its symbols, positions in range, odd shapes, strides."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ropegen import ir


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

    total = 0
    if isinstance(op, ir.RmsNormOp):
        widest = max(t.dtype.itemsize for t in op.inputs)
        for t in op.inputs:
            total += count(t) * t.dtype.itemsize
        n = count(op.x)
        total += n * op.x.dtype.itemsize * (2 if case.strided else 0) + n * (widest + 4 * 8)
        return total
    rotated = {o.source for o in op.outputs}
    for t in op.inputs:
        n = count(t)
        total += n * t.dtype.itemsize * (3 if case.strided and t.name in rotated else 1)
    for o in op.outputs:
        t = op.tensor(o.source)
        total += count(t) * (t.dtype.itemsize + 4 * 8)
    return total


def symbol_roles(op: ir.Operator) -> dict[str, str]:
    """What each symbol stands for: tokens, batch, seq, rows (table rows), sequences, or free."""
    roles: dict[str, str] = {}
    if isinstance(op, ir.RopeOp):
        for t in op.rotated:
            for d in t.dims:
                if isinstance(d.size, str) and d.role is not None:
                    roles.setdefault(d.size, d.role.value)
        if isinstance(op.angles, ir.TableAngles) and op.positions.kind is not ir.PositionKind.TOKEN:
            lead = op.tensor(op.angles.cos).axes[0].size
            if isinstance(lead, str):
                roles.setdefault(lead, "rows")
        if op.sequences:
            s = op.tensor(op.sequences).axes[0].size
            if isinstance(s, str):
                roles.setdefault(s, "sequences")
    for t in op.inputs:
        for d in t.dims:
            if isinstance(d.size, str):
                roles.setdefault(d.size, "free")
    return roles


def _float(rng: np.random.Generator, shape, dtype, scale: float = 1.0) -> np.ndarray:
    return (rng.standard_normal(shape) * scale).astype(dtype.np_dtype)


def _strided_copy(rng: np.random.Generator, a: np.ndarray) -> np.ndarray:
    """The same values as `a`, seen through a view with a gap after every element of axis 0."""
    if a.ndim == 0 or a.shape[0] == 0:
        return a
    big = np.empty((a.shape[0] * 2,) + a.shape[1:], dtype=a.dtype)
    big[::2] = a
    big[1::2] = a[::-1] if a.shape[0] else a
    return big[::2]


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
        elif role == "rows":
            sizes[sym] = 0     # decided once positions are known
        else:
            sizes[sym] = int(rng.integers(1, 8)) if case.tokens > 1 else 1

    if isinstance(op, ir.RmsNormOp):
        out = {}
        for t in op.inputs:
            shape = tuple(sizes[a.size] if isinstance(a.size, str) else a.size for a in t.axes)
            out[t.name] = _float(rng, shape, t.dtype)
        if case.strided:
            out[op.x.name] = _strided_copy(rng, out[op.x.name])
        return out

    assert isinstance(op, ir.RopeOp)
    first = op.rotated[0]
    if first.role_dim(ir.Role.TOKENS) is not None:
        B, S = 1, sizes[first.role_dim(ir.Role.TOKENS).size] if isinstance(
            first.role_dim(ir.Role.TOKENS).size, str) else first.role_dim(ir.Role.TOKENS).size
    else:
        bd, sd = first.role_dim(ir.Role.BATCH), first.role_dim(ir.Role.SEQ)
        B = sizes[bd.size] if isinstance(bd.size, str) else bd.size
        S = sizes[sd.size] if isinstance(sd.size, str) else sd.size
    arrays: dict[str, np.ndarray] = {}
    pos = op.positions
    max_rows_needed = 1
    if op.sequences:
        seqt = op.tensor(op.sequences)
        n = sizes[seqt.axes[0].size] if isinstance(seqt.axes[0].size, str) else seqt.axes[0].size
        cuts = np.sort(rng.integers(0, S + 1, n - 1)) if n > 1 else np.array([], dtype=np.int64)
        lens = np.diff(np.concatenate([[0], cuts, [S]])).astype(seqt.dtype.np_dtype)
        arrays[op.sequences] = lens
        max_rows_needed = max(1, int(lens.max()) if lens.size else 1)
    table_rows = None   # a fixed row count of the cos/sin tables bounds the positions drawn
    if isinstance(op.angles, ir.TableAngles) and pos.kind is not ir.PositionKind.TOKEN:
        lead = op.tensor(op.angles.cos).axes[0].size
        table_rows = lead if isinstance(lead, int) else None
    if pos.kind is ir.PositionKind.IDS:
        t = op.tensor(pos.ids)
        hi = case.max_position if table_rows is None else min(case.max_position, table_rows)
        ids = rng.integers(0, hi, (B, S)).astype(t.dtype.np_dtype)
        arrays[pos.ids] = ids.reshape(tuple(sizes.get(a.size, a.size) if isinstance(a.size, str) else a.size
                                            for a in t.axes))
        max_rows_needed = int(ids.max()) + 1 if ids.size else 1
    if pos.kind in (ir.PositionKind.ARANGE, ir.PositionKind.GLM2D):
        prefill = pos.kind is ir.PositionKind.ARANGE or rng.random() < 0.5
        # GLM prompts hold at least [gMASK] and BOS: first_seqlen >= 2 keeps prompt_len - 2 >= 0
        first_seqlen = max(S, 2) if prefill else int(rng.integers(2, 64))
        start = 0 if prefill and pos.kind is ir.PositionKind.GLM2D else int(rng.integers(0, case.max_position))
        if not prefill:
            start = first_seqlen + int(rng.integers(0, 64))
        pad_hi = max(1, min(first_seqlen - 1, 8)) if pos.kind is ir.PositionKind.GLM2D else 8
        if isinstance(op.angles, ir.TableAngles) and pos.kind is ir.PositionKind.ARANGE:
            pad_hi = min(pad_hi, start + 1)   # table rows are indexed: keep start + s - pad >= 0
        if isinstance(pos.start, str):
            arrays[pos.start] = np.array(start, dtype=op.tensor(pos.start).dtype.np_dtype)
        if pos.pad:
            arrays[pos.pad] = rng.integers(0, pad_hi, B).astype(op.tensor(pos.pad).dtype.np_dtype)
        if isinstance(pos.first_seqlen, str):
            arrays[pos.first_seqlen] = np.array(first_seqlen, dtype=op.tensor(pos.first_seqlen).dtype.np_dtype)
    if pos.kind in (ir.PositionKind.ARANGE, ir.PositionKind.GLM2D):
        from ropegen.ops.reference import position_streams   # the definition of these positions
        streams = position_streams(op, arrays, B, S)
        max_rows_needed = max(int(p.max()) + 1 if p.size else 1 for p in streams)
    for sym, role in roles.items():
        if role == "rows":
            sizes[sym] = max_rows_needed + int(rng.integers(0, 5))
    for t in op.inputs:
        if t.name in arrays:
            continue
        shape = tuple(sizes[a.size] if isinstance(a.size, str) else a.size for a in t.axes)
        if isinstance(op.angles, ir.ComputedAngles) and t.name == op.angles.freq_factors:
            arrays[t.name] = rng.uniform(1.0, 4.0, shape).astype(t.dtype.np_dtype)
        elif isinstance(op.angles, ir.TableAngles) and t.name in (op.angles.cos, op.angles.sin):
            arrays[t.name] = rng.uniform(-1.0, 1.0, shape).astype(t.dtype.np_dtype)
        else:
            a = _float(rng, shape, t.dtype)
            arrays[t.name] = _strided_copy(rng, a) if case.strided else a
    return arrays
