"""The rope plan: pair maps as strided PairBlocks, the canonical views of the inputs, token layout,
compute types and the planned angles (ops/rope/angles.py): every number a backend prints."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

from ropegen import ir
from ropegen.ir.dtypes import DTYPES, DType
from ropegen.ops.common import TensorPlan, tensor_plan
from ropegen.ops.rope import forms
from ropegen.ops.rope.angles import AnglesPlan
from ropegen.ops.rope.head_norm import HeadNormPlan, plan_norm


@dataclass(frozen=True)
class PairBlock:
    """`count` pairs inside one rotation unit: pair j rotates elements (a0 + j*a_step, b0 + j*b_step).

    The a element reads cos/sin column ca0 + j*ca_step, the b element column cb0 + j*cb_step
    (equal columns for a true rotation; ATB tables may differ). `stream` picks the position stream.
    """

    count: int
    a0: int
    a_step: int
    b0: int
    b_step: int
    ca0: int
    ca_step: int
    cb0: int
    cb_step: int
    stream: int

    # exclusive slice ends, so that backends print slices without doing arithmetic
    @property
    def a_end(self) -> int:
        return self.a0 + (self.count - 1) * self.a_step + 1

    @property
    def b_end(self) -> int:
        return self.b0 + (self.count - 1) * self.b_step + 1

    @property
    def ca_end(self) -> int:
        return self.ca0 + (self.count - 1) * self.ca_step + 1

    @property
    def cb_end(self) -> int:
        return self.cb0 + (self.count - 1) * self.cb_step + 1

    @property
    def same_columns(self) -> bool:
        return self.ca0 == self.cb0 and self.ca_step == self.cb_step

    @property
    def span(self) -> int:
        """Elements from the first a to the last b, inclusive."""
        return self.b_end - self.a0

    @property
    def halves(self) -> bool:
        """Pairs (a0 + j, a0 + count + j) reading one column run: the rotate_half shape."""
        return (self.a_step == 1 and self.b_step == 1 and self.b0 == self.a0 + self.count
                and self.same_columns and self.ca_step == 1)


@dataclass(frozen=True)
class StreamPlan:
    out: str
    src: str
    rotate: bool
    norm: HeadNormPlan | None = None    # rmsnorm over each head before the rotation (head_norm.py)


@dataclass(frozen=True)
class RopePlan:
    kind = "rope"
    name: str
    spec_sha256: str
    inputs: tuple[TensorPlan, ...]
    streams: tuple[StreamPlan, ...]
    token_layout: str              # "bs" (batch, seq) or "t" (packed tokens)
    token_order: str               # memory order of the token dims of positions and per-token tables:
                                   # "bs" (batch outer, or packed tokens) or "sb" (seq outer: SBHD)
    storage: DType
    compute: DType                 # arithmetic type (storage compute: the storage type)
    compute_storage_rounding: bool
    unit: int                      # rotation unit width (head_dim, or the ATB table width)
    head_dim: int
    rotary_dim: int
    blocks: tuple[PairBlock, ...]
    passthrough: tuple[tuple[int, int], ...]    # [start, stop) ranges of each unit copied as is
    n_cols: int                    # cos/sin columns per position stream
    n_streams: int
    positions: ir.Positions
    position_dtype: DType | None
    sequences: str | None
    angles: AnglesPlan
    sin_sign: int
    trig_fast: bool
    ir: ir.RopeOp
    out_dtype: DType | None = None       # fp8 outputs: v (compute type) * scale, saturated (ops/quant.py)
    quant_scales: tuple[str, ...] = ()   # the scale input of each stream, in stream order


# ---------------------------------------------------------------------------------------------
# pair maps

def neox_blocks(width: int, offset: int, col0: int, stream: int) -> tuple[PairBlock, ...]:
    h = width // 2
    return (PairBlock(h, offset, 1, offset + h, 1, col0, 1, col0, 1, stream),)


def gptj_blocks(width: int, offset: int, col0: int, stream: int) -> tuple[PairBlock, ...]:
    return (PairBlock(width // 2, offset, 2, offset + 1, 2, col0, 1, col0, 1, stream),)


def block_blocks(width: int, coeff: int) -> tuple[PairBlock, ...]:
    """ATB rotaryCoeff: stride t = W/c; block k of width 2t pairs (2tk + j, 2tk + j + t), cos per element.

    Written with as few loops as possible: either c/2 unit-stride blocks or t blocks of stride 2t.
    """
    t = width // coeff
    nblk = coeff // 2
    if nblk <= t:
        return tuple(PairBlock(t, 2 * t * k, 1, 2 * t * k + t, 1, 2 * t * k, 1, 2 * t * k + t, 1, 0)
                     for k in range(nblk))
    return tuple(PairBlock(nblk, j, 2 * t, j + t, 2 * t, j, 2 * t, j + t, 2 * t, 0) for j in range(t))


def full_width_blocks(p: ir.Pairing, rotary_dim: int) -> tuple[PairBlock, ...]:
    """Full-width tables (HF's cat / repeat_interleave caches): element e reads column e."""
    h = rotary_dim // 2
    if p.kind is ir.PairKind.NEOX:
        return (PairBlock(h, 0, 1, h, 1, 0, 1, h, 1, 0),)
    return (PairBlock(h, 0, 2, 1, 2, 0, 2, 1, 2, 0),)


def _pairing_blocks(p: ir.Pairing, unit: int, rotary_dim: int,
                    table_width: int | None) -> tuple[tuple[PairBlock, ...], int]:
    """The pair blocks of one unit and the number of cos/sin columns they read."""
    if p.kind in (ir.PairKind.NEOX, ir.PairKind.GPTJ) and table_width == rotary_dim:
        return full_width_blocks(p, rotary_dim), rotary_dim
    if p.kind is ir.PairKind.NEOX:
        return neox_blocks(rotary_dim, 0, 0, 0), rotary_dim // 2
    if p.kind is ir.PairKind.GPTJ:
        return gptj_blocks(rotary_dim, 0, 0, 0), rotary_dim // 2
    if p.kind is ir.PairKind.BLOCK:
        return block_blocks(unit, p.coeff), unit
    half = rotary_dim // 2
    inner = neox_blocks if p.inner is ir.PairKind.NEOX else gptj_blocks
    return inner(half, 0, 0, 0) + inner(half, half, 0, 1), half // 2


def stream_split(blocks: tuple[PairBlock, ...], stream_of: Callable[[int], int]) -> tuple[PairBlock, ...]:
    """The pairs of `blocks` (pair j in order) regrouped by stream_of(j): runs of equal steps become
    one block each (M-RoPE's sections are runs; Qwen3-VL's interleaving is stride-3 runs)."""
    pairs = [(blk.a0 + k * blk.a_step, blk.b0 + k * blk.b_step, blk.ca0 + k * blk.ca_step,
              blk.cb0 + k * blk.cb_step) for blk in blocks for k in range(blk.count)]
    by_stream: dict[int, list[tuple[int, int, int, int]]] = {}
    for j, pr in enumerate(pairs):
        by_stream.setdefault(stream_of(j), []).append(pr)
    out: list[PairBlock] = []
    for stream in sorted(by_stream):
        run: list[tuple[int, int, int, int]] = []
        for pr in by_stream[stream] + [None]:
            if pr is not None and (len(run) < 2 or all(pr[i] - run[-1][i] == run[1][i] - run[0][i] for i in range(4))):
                run.append(pr)
                continue
            if run:
                steps = [run[1][i] - run[0][i] if len(run) > 1 else 1 for i in range(4)]
                out.append(PairBlock(len(run), run[0][0], steps[0], run[0][1], steps[1], run[0][2], steps[2],
                                     run[0][3], steps[3], stream))
            run = [pr] if pr is not None else []
    return tuple(out)


def table_width(op: ir.RopeOp) -> int:
    """The columns of the cos table (and of sin): a fused cos_sin cache holds both side by side."""
    return int(op.tensor(op.angles.cos).axes[-1].size) - op.angles.sin_column


def plan(op: ir.RopeOp, sha: str) -> RopePlan:
    first = op.rotated[0]
    head_dim = int(first.role_dim(ir.Role.HEAD_DIM).size)
    if op.pairing.kind is ir.PairKind.BLOCK:
        unit = table_width(op)
        rotary = unit
    else:
        unit = head_dim
        rotary = op.rotary_dim
    form = forms.angles_of(op.angles)
    width = table_width(op) if form.tables else None
    blocks, n_cols = _pairing_blocks(op.pairing, unit, rotary, width)
    lo = op.rotary_start
    if lo:       # a window [lo, lo + rotary): the same pairs, moved; columns do not move
        blocks = tuple(replace(b, a0=b.a0 + lo, b0=b.b0 + lo) for b in blocks)
    if op.positions.kind is ir.PositionKind.MROPE:
        blocks = stream_split(blocks, lambda j: forms.mrope_stream(op.positions, j))
    passthrough = tuple((a, b) for a, b in ((0, lo), (lo + rotary, unit)) if a < b)
    rotated_names = {o.source for o in op.outputs}
    inputs = tuple(tensor_plan(t, unit if t.name in rotated_names else None) for t in op.inputs)
    storage = first.dtype
    if op.compute is ir.Compute.STORAGE:
        compute = storage
    else:
        compute = DTYPES[op.compute.value]
    token_layout = "t" if first.role_dim(ir.Role.TOKENS) is not None else "bs"
    token_order = "sb" if [d.role for d in first.token_dims] == [ir.Role.SEQ, ir.Role.BATCH] else "bs"
    pos_dtype = None if op.positions.ids is None else op.tensor(op.positions.ids).dtype
    return RopePlan(
        name=op.name, spec_sha256=sha, inputs=inputs,
        streams=tuple(StreamPlan(o.name, o.source, o.rotate, plan_norm(op, o)) for o in op.outputs),
        token_layout=token_layout, token_order=token_order, storage=storage, compute=compute,
        compute_storage_rounding=op.compute is ir.Compute.STORAGE,
        unit=unit, head_dim=head_dim, rotary_dim=rotary, blocks=blocks, passthrough=passthrough,
        n_cols=n_cols, n_streams=op.positions.streams, positions=op.positions, position_dtype=pos_dtype,
        sequences=op.sequences, angles=form.plan(op, n_cols),
        sin_sign=-1 if op.direction is ir.Direction.BACKWARD else 1,
        trig_fast=op.trig is ir.Trig.FAST, ir=op, out_dtype=op.out_dtype, quant_scales=op.quant_scales)


def constants(plan: RopePlan) -> list[float]:
    return plan.angles.constants()
