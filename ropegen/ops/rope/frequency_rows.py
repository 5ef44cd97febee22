"""The run-time frequency rows of length-dependent scalings (longrope, dynamic_ntk): the length of
each unit of a call (the whole call, or each packed sequence) and the float64 inverse frequencies
every backend's kernel reads for it, a [units, columns] buffer filled on the host before launch.

Every row is the correctly rounded value of its form's exact formula (forms/scaling_length.py),
evaluated once per distinct key (longrope: short or long; dynamic_ntk: L) and cached, so the rows
are the same bits on every machine and backend. The length of a unit is max(position) + 1, as
Hugging Face's `dynamic_rope_update` takes it; a unit without tokens takes the row of length 0.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Callable, Mapping, Sequence

import numpy as np

from ropegen import exact, ir
from ropegen.lower.strides import tokens_of
from ropegen.ops.rope import forms
from ropegen.ops.rope.angles import base_inv_freq

Read = Callable[[str], np.ndarray]     # an input's values on the host, by name


def _scalar(v, read: Read) -> int:
    return v if isinstance(v, int) else int(np.asarray(read(v)).reshape(()))


def sequence_lengths(p, read: Read) -> np.ndarray:
    """The packed sequences' token counts (an indptr's differences), as int64."""
    values = np.asarray(read(p.sequences)).astype(np.int64)
    return np.diff(values) if p.ir.sequences_indptr else values


def unit_lengths(p, read: Read, shapes: Mapping[str, Sequence[int]]) -> list[int]:
    """max(position) + 1 of each unit of a call: one for the call, or one per packed sequence."""
    pos: ir.Positions = p.positions
    if p.angles.length_unit == "sequence":
        lens = sequence_lengths(p, read)
        offs = (np.asarray(read(pos.offsets)).astype(np.int64) if pos.offsets
                else np.zeros(lens.shape, np.int64))
        return [int(o) + int(n) if n > 0 else 0 for n, o in zip(lens.tolist(), offs.tolist())] \
            + [0] * max(0, len(lens) - len(offs))
    B, S = tokens_of(p, shapes)
    if not B * S:
        return [0]
    if pos.kind is ir.PositionKind.ARANGE:
        low_pad = int(np.asarray(read(pos.pad)).astype(np.int64).min()) if pos.pad else 0
        return [_scalar(pos.start, read) + S - low_pad]
    return [int(np.asarray(read(pos.ids)).max()) + 1]     # ids, mrope: every stream's positions


class FrequencyRows:
    """The rows of one plan's length-dependent frequencies, cached per key (bounded)."""

    CACHED = 4096        # distinct keys remembered (dynamic_ntk during generation: one per length)

    def __init__(self, p):
        a = p.ir.angles
        self.plan = p
        self.scaling = a.scaling
        self.row = forms.scaling_of(a.scaling)
        self.dim = p.ir.rotary_dim
        self.base = a.base
        self.n = p.n_cols
        self._inv = None
        self._cache: OrderedDict = OrderedDict()

    def at(self, length: int) -> np.ndarray:
        """The float64 inverse frequencies of a unit of `length` (read-only)."""
        key = self.row.length_key(self.scaling, length)
        got = self._cache.get(key)
        if got is None:
            if self._inv is None:
                self._inv = base_inv_freq(self.base, self.dim, self.n)
            vals = self.row.at_length(self._inv, self.scaling, self.dim, self.base, key)
            got = np.array([exact.f64(v) for v in vals], dtype=np.float64)
            got.flags.writeable = False
            self._cache[key] = got
            if len(self._cache) > self.CACHED:
                self._cache.popitem(last=False)
        else:
            self._cache.move_to_end(key)
        return got

    def rows(self, lengths: Sequence[int]) -> np.ndarray:
        """[max(units, 1), columns] float64, C-contiguous: row u for unit u (a call without
        sequences still gets one row, so the kernels' pointer is never empty)."""
        out = np.empty((max(len(lengths), 1), self.n), dtype=np.float64)
        if not lengths:
            out[0] = self.at(0)
        for u, length in enumerate(lengths):
            out[u] = self.at(length)
        return out

    def for_call(self, read: Read, shapes: Mapping[str, Sequence[int]]) -> np.ndarray:
        return self.rows(unit_lengths(self.plan, read, shapes))


def frequency_rows(p) -> FrequencyRows | None:
    """The run-time rows of a plan whose frequencies depend on the length; None otherwise (other
    rope plans, and plans of other operator kinds)."""
    if getattr(getattr(p, "angles", None), "length_unit", None) is None:
        return None
    return FrequencyRows(p)
