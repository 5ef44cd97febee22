"""Rope's position forms, one row each: `positions = ...`.

A row says how the spec writes the form, checks it and builds its ir.Positions, and names what later
stages do with it: its position streams in the float64 reference (ops/rope/reference.py), what it
draws in ops/rope/inputs.py (test cases) and ops/rope/workload.py (benchmark sizes), its explain text
and the detail an out-of-range status message adds.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ropegen import ir
from ropegen.spec import ast as A


@dataclass(frozen=True)
class PositionForm:
    kind: ir.PositionKind
    word: str | None         # the spec word; None: no word of its own (no setting, or an input's name)
    bare: bool               # may be written as a bare word (else only as a call)
    synopsis: str | None     # how the hints list it
    args: tuple[str, ...]
    required: tuple[str, ...]
    # (checker, row, value, first rotated tensor, sequences input) -> IR
    check: Callable[..., ir.Positions] | None
    per_token: bool          # no positions: table rows are tokens, and nothing to compute angles from
    reference: str           # its position streams in ops/rope/reference.py
    inputs: str | None       # what it draws in ops/rope/inputs.py
    explain: Callable[[ir.Positions], str]
    takes_ids: bool = False  # positions are ids read from an input (what peers taking position ids accept)
    bench: str | None = None  # what it draws at benchmark sizes in ops/rope/workload.py
    # (positions, sequences input, read(name) -> values, input shapes) -> what a "position out of range"
    # status message adds about the positions the call asked for
    range_note: Callable[..., str] | None = None
    # positions are computed on the device as start + token index - pad (+ first_seqlen) in int64: a host
    # that cannot see the kernel's overflow status checks before launch that they fit
    offset_arith: bool = False
    # what length-dependent frequencies (longrope, dynamic_ntk) are chosen per: "call" (the largest
    # position of the call) or "sequence" (each packed sequence's largest); None: not available
    length_unit: str | None = None


def batch_vector(cx, v: A.Value, first: ir.Tensor, what: str) -> str:
    t = cx.ref(v, what)
    b = first.role_dim(ir.Role.BATCH)
    if b is None:
        cx.fail("C016", f"{what} needs rotated tensors with a 'batch' dimension", v.loc)
    if t.dtype.is_float or len(t.axes) != 1 or t.axes[0].size != b.size:
        cx.fail("C016", f"{what} '{t.name}' must be an integer tensor [{b.size}]", t.loc)
    return t.name


def _ids(cx, row, v: A.Word, first: ir.Tensor, sequences: str | None) -> ir.Positions:
    t = cx.ref(v, "positions")
    if t.dtype.name not in ("i32", "i64"):
        cx.fail("C017", f"positions '{t.name}' must be i32 or i64, not {t.dtype.name}", t.loc)
    want = [d.size for d in first.token_dims]
    got = [a.size for a in t.axes]
    if got != want:
        cx.fail("C016", f"positions '{t.name}' has shape [{', '.join(map(str, got))}]; "
                f"expected the token dims [{', '.join(map(str, want))}]", t.loc)
    return ir.Positions(row.kind, ids=t.name)


def _in_sequence(cx, row, v, first: ir.Tensor, sequences: str | None) -> ir.Positions:
    offsets = None
    if isinstance(v, A.Call) and v.args:
        args = cx.call_args(v, row.args, row.required)
        if not isinstance(args["start"], A.Word):
            cx.fail("C008", "in_sequence(start = ...) names an input with each sequence's first position",
                    args["start"].loc, "a constant start for every token is arange(start = ...)")
        t = cx.ref(args["start"], "start")
        if t.dtype.name not in ("i32", "i64") or len(t.axes) != 1:
            cx.fail("C016", f"in_sequence start '{t.name}' must be an i32 or i64 tensor [sequences]: the "
                    "position of each sequence's first token", t.loc)
        offsets = t.name
    if sequences is None:
        cx.fail("C030", "positions = in_sequence needs `sequences = SEQLEN` or `sequences = indptr(I)`", v.loc)
    return ir.Positions(row.kind, offsets=offsets)


def _start_pad(cx, args: dict, first: ir.Tensor) -> tuple[ir.Scalar, str | None]:
    start = cx.scalar(args["start"], "start") if "start" in args else 0
    pad = batch_vector(cx, args["pad"], first, "pad") if "pad" in args else None
    return start, pad


def _arange(cx, row, v: A.Call, first: ir.Tensor, sequences: str | None) -> ir.Positions:
    start, pad = _start_pad(cx, cx.call_args(v, row.args, row.required), first)
    if pad is not None and first.role_dim(ir.Role.SEQ) is None:
        cx.fail("C016", "arange(pad=...) needs [batch, seq] token dims", v.loc)
    return ir.Positions(row.kind, start=start, pad=pad)


def _glm2d(cx, row, v: A.Call, first: ir.Tensor, sequences: str | None) -> ir.Positions:
    if [d.role for d in first.token_dims] != [ir.Role.BATCH, ir.Role.SEQ]:
        cx.fail("C016", "glm2d positions need rotated tensors laid out [batch, seq, ...]", v.loc)
    args = cx.call_args(v, row.args, row.required)
    start, pad = _start_pad(cx, args, first)
    first_seqlen = cx.scalar(args["first_seqlen"], "first_seqlen")
    return ir.Positions(row.kind, start=start, pad=pad, first_seqlen=first_seqlen, streams=2)


def _mrope(cx, row, v: A.Call, first: ir.Tensor, sequences: str | None) -> ir.Positions:
    args = cx.call_args(v, row.args, row.required, positional=("positions",))
    t = cx.ref(args["positions"], "mrope positions")
    if t.dtype.name not in ("i32", "i64"):
        cx.fail("C017", f"positions '{t.name}' must be i32 or i64, not {t.dtype.name}", t.loc)
    sec_v = args["sections"]
    if not isinstance(sec_v, A.ListValue) or not sec_v.items:
        cx.fail("C008", "sections must be a list of pair counts, e.g. [16, 24, 24]", sec_v.loc)
    sections = tuple(int(cx.number(x, "a section", integer=True, positive=True)) for x in sec_v.items)
    want = [len(sections)] + [d.size for d in first.token_dims]
    if [a.size for a in t.axes] != want:
        cx.fail("C016", f"mrope positions '{t.name}' has shape [{', '.join(str(a.size) for a in t.axes)}]; "
                f"expected [{', '.join(map(str, want))}]: one row of positions per section", t.loc)
    interleaved = False
    if "interleaved" in args:
        interleaved = cx.word(args["interleaved"], "interleaved", ("true", "false")) == "true"
    return ir.Positions(row.kind, ids=t.name, streams=len(sections), sections=sections, interleaved=interleaved)


def mrope_stream(pos: ir.Positions, j: int) -> int:
    """The position stream of pair j (HF's mrope_section split, or Qwen3-VL's round-robin
    `apply_interleaved_mrope`: pair j takes stream j % n while j < n * sections[j % n], else stream 0)."""
    if pos.interleaved:
        n = len(pos.sections)
        k = j % n
        return k if k and j < n * pos.sections[k] else 0
    end = 0
    for k, size in enumerate(pos.sections):
        end += size
        if j < end:
            return k
    return len(pos.sections) - 1


def _ids_span(pos: ir.Positions, sequences: str | None, read, shapes) -> str:
    if not int(np.prod(shapes[pos.ids])):
        return ""
    ids = read(pos.ids)
    return f", positions span [{int(ids.min())}, {int(ids.max())}]"


def _longest_sequence(pos: ir.Positions, sequences: str | None, read, shapes) -> str:
    lens = read(sequences)     # lengths (failures.py reads an indptr's differences)
    return f", the longest sequence has {int(lens.max())} tokens" if lens.size else ""


P = ir.PositionKind
POSITIONS: tuple[PositionForm, ...] = (
    PositionForm(P.TOKEN, None, bare=False, synopsis=None, args=(), required=(), check=None, per_token=True,
                 reference="token_positions", inputs=None,
                 explain=lambda pos: "none: tables hold one row per token"),
    PositionForm(P.IDS, None, bare=True, synopsis="an integer input", args=(), required=(), check=_ids,
                 per_token=False, reference="id_positions", inputs="draw_ids",
                 explain=lambda pos: f"gathered from '{pos.ids}'", takes_ids=True, bench="bench_ids",
                 range_note=_ids_span, length_unit="call"),
    PositionForm(P.IN_SEQUENCE, "in_sequence", bare=True, synopsis="in_sequence(start = OFFSETS)", args=("start",),
                 required=(), check=_in_sequence, per_token=False, reference="in_sequence_positions",
                 inputs="draw_offsets", bench="bench_sequence_offsets",
                 explain=lambda pos: "index of each token inside its sequence"
                 + (f" + {pos.offsets}[its sequence]" if pos.offsets else ""), range_note=_longest_sequence,
                 length_unit="sequence"),
    PositionForm(P.ARANGE, "arange", bare=False, synopsis="arange(start=, pad=)", args=("start", "pad"),
                 required=(), check=_arange, per_token=False, reference="arange_positions", inputs="draw_arange",
                 explain=lambda pos: f"start ({pos.start}) + s - pad ({pos.pad or 0})[b]", bench="bench_offsets",
                 offset_arith=True, length_unit="call"),
    PositionForm(P.GLM2D, "glm2d", bare=False, synopsis="glm2d(start=, pad=, first_seqlen=)",
                 args=("start", "pad", "first_seqlen"), required=("first_seqlen",), check=_glm2d,
                 per_token=False, reference="glm2d_positions", inputs="draw_glm2d",
                 explain=lambda pos: f"GLM 2-D: pos0/pos1 from start={pos.start}, pad={pos.pad or 0}, "
                                     f"first_seqlen={pos.first_seqlen}", bench="bench_offsets",
                 offset_arith=True),
    PositionForm(P.MROPE, "mrope", bare=False, synopsis="mrope(P, sections = [..])",
                 args=("positions", "sections", "interleaved"), required=("positions", "sections"), check=_mrope,
                 per_token=False, reference="mrope_positions", inputs="draw_mrope",
                 explain=lambda pos: (f"M-RoPE from '{pos.ids}': {len(pos.sections)} streams, pairs "
                                      f"{list(pos.sections)} per stream"
                                      + (", interleaved (Qwen3-VL)" if pos.interleaved else ", in runs (Qwen2-VL)")),
                 range_note=_ids_span, length_unit="call"),
)
_POSITION_BY_KIND = {f.kind: f for f in POSITIONS}
POSITION_WORDS = tuple(f.word for f in POSITIONS if f.word)
POSITION_SYNOPSIS = ", ".join(f.synopsis for f in POSITIONS if f.synopsis)
ABSENT_POSITIONS = next(f for f in POSITIONS if f.check is None)   # the form when `positions` is not set


def position_of(pos: ir.Positions) -> PositionForm:
    return _POSITION_BY_KIND[pos.kind]


def position_written(v: A.Word | A.Call) -> PositionForm | None:
    """The form a positions value is written in; None when no form is written so."""
    named = [f for f in POSITIONS if f.word == v.name and (f.bare or isinstance(v, A.Call))]
    if not named and isinstance(v, A.Word):   # any other word names the input holding the positions
        named = [f for f in POSITIONS if f.word is None and f.bare]
    return named[0] if named else None
