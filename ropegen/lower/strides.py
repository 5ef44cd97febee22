"""The one stride canonicaliser: where a rotated tensor's batch, seq, head and head_dim steps lie in
memory, and B and S (batch rows, tokens per row) of a call, from the IR axes.

Kernels of every target index a rotated tensor as [b, s, h, d] with one element stride per axis
(AXES); packed tokens are one batch row ("b" stride 0, "s" the token stride). Strides here are in
elements, so NumPy arrays (byte strides, see `element_strides`) and device arrays (element strides
already) go through the same function.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from ropegen import ir

AXES = ("b", "s", "h", "d")


def element_strides(byte_strides: Sequence[int], itemsize: int,
                    shape: Sequence[int] | None = None) -> tuple[int, ...] | None:
    """Byte strides as element strides; None when one is not a whole number of elements. Given the
    `shape`, an axis of length 1 is exempt (its floor is kept): nothing ever steps along it, and
    libraries leave any stride there."""
    out = tuple(s // itemsize for s in byte_strides)
    if shape is None:
        shape = (2,) * len(out)
    return out if all(s * itemsize == b or n <= 1 for s, b, n in zip(out, byte_strides, shape)) else None


def dim_strides(t: ir.Tensor, strides: Sequence[int]) -> list[int]:
    """The element stride of every dim of `t` (its IR dims in order) from the strides of its memory
    axes: a merged axis (e.g. heads * head_dim) is split row-major."""
    return [strides[i] * mult for i, mult in _dim_axes(t)]


def _dim_axes(t: ir.Tensor) -> list[tuple[int, int]]:
    """(memory axis, multiplier of that axis's stride) of every dim of `t`."""
    out: list[tuple[int, int]] = []
    for i, ax in enumerate(t.axes):
        inner = 1
        rev = []
        for d in reversed(ax.parts):
            rev.append((i, inner))
            if len(ax.parts) > 1:
                inner *= int(d.size)
        out.extend(reversed(rev))
    return out


Recipe = tuple[tuple[str, int, int], ...]   # (canonical axis, memory axis, multiplier); absent: 0


def recipe(t: ir.Tensor, layout: str) -> Recipe:
    """How to read a rotated tensor's canonical strides off its memory strides, worked out once per
    tensor (a kernel's host side keeps it; `apply` runs per call). `layout` is the plan's
    token_layout ("t": packed tokens, one batch row: no "b" entry)."""
    where = {d.role: axis for d, axis in zip(t.dims, _dim_axes(t))}
    roles = {"s": ir.Role.TOKENS, "h": ir.Role.HEADS, "d": ir.Role.HEAD_DIM} if layout == "t" else \
        {"b": ir.Role.BATCH, "s": ir.Role.SEQ, "h": ir.Role.HEADS, "d": ir.Role.HEAD_DIM}
    return tuple((a, *where[roles[a]]) for a in AXES if a in roles)


def apply(r: Recipe, strides: Sequence[int], shape: Sequence[int] | None = None) -> dict[str, int]:
    """Element strides along b, s, h and d from a tensor's memory strides (in elements). All zero for
    an empty array (given its `shape`): nothing is read or written, and libraries report any
    strides for one."""
    out = dict.fromkeys(AXES, 0)
    if shape is not None and 0 in tuple(shape):
        return out
    for a, i, mult in r:
        out[a] = strides[i] * mult
    return out


def canonical_strides(t: ir.Tensor, strides: Sequence[int], layout: str,
                      shape: Sequence[int] | None = None) -> dict[str, int]:
    """Element strides along b, s, h (real heads) and d of a rotated tensor, from the memory strides
    of its axes (see `recipe` and `apply`)."""
    return apply(recipe(t, layout), strides, shape)


@dataclass(frozen=True)
class TokenDims:
    """Where B and S of a call come from: memory axes of the first rotated input."""

    tensor: str                  # the first rotated input
    batch: ir.Size | None        # its batch size (None: packed tokens, one batch row)
    seq: ir.Size                 # its seq size, or the packed token count
    batch_axis: int | None       # memory axes holding them
    seq_axis: int


def token_dims(plan) -> TokenDims:
    """B and S of a RoPE plan as IR sizes (ints or symbols) and memory axes."""
    first = plan.ir.tensor(plan.streams[0].src)
    axis = {ax.parts[0].role: i for i, ax in enumerate(first.axes) if len(ax.parts) == 1}
    if plan.token_layout == "t":
        return TokenDims(first.name, None, first.role_dim(ir.Role.TOKENS).size, None, axis[ir.Role.TOKENS])
    return TokenDims(first.name, first.role_dim(ir.Role.BATCH).size, first.role_dim(ir.Role.SEQ).size,
                     axis[ir.Role.BATCH], axis[ir.Role.SEQ])


def tokens_of(plan, shapes: Mapping[str, Sequence[int]]) -> tuple[int, int]:
    """(B, S) of a call from its input shapes: packed tokens are one batch row of T."""
    td = token_dims(plan)
    shape = shapes[td.tensor]
    return (1 if td.batch_axis is None else int(shape[td.batch_axis])), int(shape[td.seq_axis])
