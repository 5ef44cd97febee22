"""RoPE work decomposition for any GPU target: a rotation unit cut into tiles of aligned vectors.

A rotation unit (``plan.unit`` elements of one head) is cut into *tiles*. A tile is one or two
aligned vectors of V consecutive elements that are closed under the pair map: every rotated
element of the tile has its partner inside the same tile. One thread owns one tile of one token:
it computes (or loads) the tile's cos/sin values once and then applies them to that tile in every
head of every rotated tensor (q and k in one launch), so angles are reused across heads.

* neox / ATB ``block`` halves: a tile is two vectors, ``a`` lanes and their ``b`` partners;
* gptj / ATB strided blocks: a tile is one vector holding whole pairs;
* partial rotation: tail vectors are copy-only tiles.

Each tile element k carries (partner element, angle slot, add-or-subtract) or "copy"; tiles
with the same shape whose offsets advance by constant steps form a :class:`TileGroup`, printed as
one branch of the kernel. The vector kernel uses V = 16 bytes / itemsize (halved until tiles
exist); the scalar kernel uses V = 1 (tiles are single pairs, exactly the NumPy pair map) and
honours any element stride.
"""
from __future__ import annotations

from dataclasses import dataclass

from ropegen.ops.plan import RopePlan

VECTOR_BYTES = 16          # one 128-bit load / store per vector
MAX_ANGLE_REGISTERS = 16   # cos and sin of one tile (8 pairs' worth in float)


# ---------------------------------------------------------------------------------------------
# the element map of one rotation unit

@dataclass(frozen=True)
class Elem:
    """What happens to one element of a rotation unit."""

    copy: bool
    partner: int = -1      # element index of the partner inside the unit
    col: int = -1          # cos/sin column
    add: bool = False      # y = x*cos + partner*sin (True) or x*cos - partner*sin (False)
    stream: int = 0


def element_map(p: RopePlan) -> tuple[Elem, ...]:
    """Per element of a unit, from the plan's pair blocks (sin_sign folded into add/subtract)."""
    m: list[Elem | None] = [None] * p.unit
    # a: y_a = x_a cos - x_b sin; b: y_b = x_b cos + x_a sin; the inverse rotation flips sin
    a_add = p.sin_sign < 0
    for blk in p.blocks:
        for j in range(blk.count):
            a, b = blk.a0 + j * blk.a_step, blk.b0 + j * blk.b_step
            for e, partner, col, add in ((a, b, blk.ca0 + j * blk.ca_step, a_add),
                                         (b, a, blk.cb0 + j * blk.cb_step, not a_add)):
                if not 0 <= e < p.unit or m[e] is not None:
                    raise AssertionError(f"{p.name}: pair blocks overlap or leave the unit at {e}")
                m[e] = Elem(False, partner, col, add, blk.stream)
    for lo, hi in p.passthrough:
        for e in range(lo, hi):
            if m[e] is not None:
                raise AssertionError(f"{p.name}: passthrough overlaps a pair at {e}")
            m[e] = Elem(True)
    missing = [e for e, x in enumerate(m) if x is None]
    if missing:
        raise AssertionError(f"{p.name}: elements {missing} of the unit are neither rotated nor copied")
    return tuple(m)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# tiles

@dataclass(frozen=True)
class TileElem:
    k: int                 # element index inside the tile
    vec: int               # ... which is lane `lane` of the tile's vector `vec`
    lane: int
    copy: bool
    partner: int = -1      # tile element index of the partner
    pvec: int = -1         # ... its vector and lane
    plane: int = -1
    slot: int = -1         # angle slot
    add: bool = False


def _elem(k: int, v: int, copy: bool, partner: int = -1, slot: int = -1, add: bool = False) -> TileElem:
    if copy:
        return TileElem(k, k // v, k % v, True)
    return TileElem(k, k // v, k % v, False, partner, partner // v, partner % v, slot, add)


@dataclass(frozen=True)
class Tile:
    offsets: tuple[int, ...]     # unit offsets of the tile's vectors (multiples of V)
    cols: tuple[int, ...]        # cos/sin columns of its slots, ascending (empty: copy-only)
    stream: int
    elems: tuple[TileElem, ...]


@dataclass(frozen=True)
class TileGroup:
    """Tiles begin..end-1 of a unit: tile i has vectors at offsets[v] + (i - begin) * step and
    angle slots at columns col0 + (i - begin) * col_step + slot_offsets[q]."""

    begin: int
    end: int
    offsets: tuple[int, ...]
    step: int
    col0: int
    col_step: int
    slot_offsets: tuple[int, ...]
    stream: int
    elems: tuple[TileElem, ...]

    @property
    def n_vec(self) -> int:
        return len(self.offsets)

    @property
    def n_slots(self) -> int:
        return len(self.slot_offsets)

    @property
    def copy_only(self) -> bool:
        return not self.slot_offsets

    @property
    def slot_advance(self) -> tuple[int, ...]:
        """Columns between consecutive slots (ggml's running product steps this many times)."""
        return tuple(b - a for a, b in zip((0,) + self.slot_offsets[:-1], self.slot_offsets))

    def tile(self, i: int) -> Tile:
        """The i-th tile of the unit (begin <= i < end), expanded: used by tests."""
        d = i - self.begin
        base = self.col0 + d * self.col_step
        return Tile(tuple(o + d * self.step for o in self.offsets),
                    tuple(base + s for s in self.slot_offsets), self.stream, self.elems)


def tiles(emap: tuple[Elem, ...], v: int) -> tuple[Tile, ...] | None:
    """Cut a unit into tiles of vectors of `v` elements; None when `v` does not fit the pair map."""
    unit = len(emap)
    if v < 1 or unit % v:
        return None
    n = unit // v
    linked: list[set[int]] = [{c} for c in range(n)]
    for e, x in enumerate(emap):
        if not x.copy:
            linked[e // v].add(x.partner // v)
    out: list[Tile] = []
    done: set[int] = set()
    for c in range(n):
        if c in done:
            continue
        chunks = sorted(linked[c])
        if len(chunks) > 2 or any(linked[d] != linked[c] for d in chunks):
            return None
        done.update(chunks)
        elems_unit = [ch * v + lane for ch in chunks for lane in range(v)]
        index = {e: k for k, e in enumerate(elems_unit)}
        rot = [emap[e] for e in elems_unit if not emap[e].copy]
        streams = {x.stream for x in rot}
        if len(streams) > 1:
            return None
        cols = tuple(sorted({x.col for x in rot}))
        slot = {col: q for q, col in enumerate(cols)}
        elems = []
        for k, e in enumerate(elems_unit):
            x = emap[e]
            if x.copy:
                elems.append(_elem(k, v, True))
            else:
                elems.append(_elem(k, v, False, index[x.partner], slot[x.col], x.add))
        out.append(Tile(tuple(ch * v for ch in chunks), cols, streams.pop() if streams else 0, tuple(elems)))
    return tuple(out)


def group_tiles(ts: tuple[Tile, ...]) -> tuple[TileGroup, ...]:
    """Runs of same-shaped tiles whose vector offsets and columns advance by constant steps."""
    groups: list[TileGroup] = []

    def shape(t: Tile):
        rel = tuple(o - t.offsets[0] for o in t.offsets)
        slots = tuple(c - t.cols[0] for c in t.cols)
        return rel, slots, t.stream, t.elems

    i = 0
    while i < len(ts):
        t0 = ts[i]
        j = i + 1
        step = col_step = None
        while j < len(ts) and shape(ts[j]) == shape(t0):
            s = ts[j].offsets[0] - ts[j - 1].offsets[0]
            cs = (ts[j].cols[0] - ts[j - 1].cols[0]) if t0.cols else 0
            if step is None:
                step, col_step = s, cs
            elif (s, cs) != (step, col_step):
                break
            j += 1
        col0 = t0.cols[0] if t0.cols else 0
        groups.append(TileGroup(i, j, t0.offsets, step or 0, col0, col_step or 0,
                                tuple(c - col0 for c in t0.cols), t0.stream, t0.elems))
        i = j
    return tuple(groups)


def scalar_tiles(p: RopePlan) -> tuple[Tile, ...]:
    """Single-pair tiles in pair-block order (each block becomes one affine group), then copies."""
    emap = element_map(p)
    out: list[Tile] = []
    for blk in p.blocks:
        for j in range(blk.count):
            a, b = blk.a0 + j * blk.a_step, blk.b0 + j * blk.b_step
            ea, eb = emap[a], emap[b]
            cols = tuple(sorted({ea.col, eb.col}))
            out.append(Tile((a, b), cols, blk.stream,
                            (_elem(0, 1, False, 1, cols.index(ea.col), ea.add),
                             _elem(1, 1, False, 0, cols.index(eb.col), eb.add))))
    for lo, hi in p.passthrough:
        out.extend(Tile((e,), (), 0, (_elem(0, 1, True),)) for e in range(lo, hi))
    return tuple(out)


def expand(groups: tuple[TileGroup, ...]) -> tuple[Tile, ...]:
    return tuple(g.tile(i) for g in groups for i in range(g.begin, g.end))


def acc_registers(p: RopePlan) -> int:
    """32-bit registers of one value of the arithmetic type (float64 compute: two)."""
    return 2 if p.compute.name == "f64" else 1


def vector_width(p: RopePlan) -> int:
    """Largest power-of-two vector (at most 16 bytes) that tiles the unit with at most
    MAX_ANGLE_REGISTERS registers of cos/sin per thread (more spills next to the vectors)."""
    emap = element_map(p)
    acc_regs = acc_registers(p)
    v = max(1, VECTOR_BYTES // p.storage.itemsize)
    while v > 1:
        ts = tiles(emap, v)
        if ts is not None and 2 * max(len(t.cols) for t in ts) * acc_regs <= MAX_ANGLE_REGISTERS:
            return v
        v //= 2
    return 1
