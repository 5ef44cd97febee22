"""What a rope kernel's failure statuses say about the call: the messages of a bad sequences vector,
a position outside the tables and position arithmetic overflowing int64 (lower/status.py holds the
codes, the exceptions they become and the messages every kind shares)."""
from __future__ import annotations

from typing import Callable, Mapping

import numpy as np

from ropegen.lower.status import Status
from ropegen.lower.strides import tokens_of
from ropegen.ops.rope import forms
from ropegen.ops.rope.plan import RopePlan


def status_message(p: RopePlan, code: int, shapes: Mapping[str, tuple[int, ...]],
                   read: Callable[[str], np.ndarray] | None) -> str | None:
    if code == Status.ESEQUENCES:
        _, S = tokens_of(p, shapes)
        offsets = f", with one offset in '{p.positions.offsets}' per sequence" if p.positions.offsets else ""
        if p.ir.sequences_indptr:
            return (f"{p.sequences}: the indptr must start at 0, never decrease and end at the {S} packed "
                    f"tokens{offsets}")
        return f"{p.sequences}: sequence lengths must be >= 0 and sum to the {S} packed tokens{offsets}"
    if code == Status.EPOSITION:
        table = p.angles.cos if forms.angles_of(p.ir.angles).tables else None
        rows = shapes[table][0] if table else 0
        msg = f"position out of range: the cos/sin tables have {rows} rows"
        note = forms.position_of(p.positions).range_note   # what its position form can say of the positions asked
        if read is not None and note is not None:
            def values(name: str) -> np.ndarray:     # the sequences as lengths, whatever form holds them
                v = np.asarray(read(name))
                return np.diff(v.astype(np.int64)) if name == p.sequences and p.ir.sequences_indptr else v
            msg += note(p.positions, p.sequences, values, shapes)
        return msg
    if code == Status.EOVERFLOW:
        return (f"position arithmetic overflows int64 ({p.positions.kind.value} positions: start, "
                f"sequence length, pad and first_seqlen must keep every position within int64)")
    return None
