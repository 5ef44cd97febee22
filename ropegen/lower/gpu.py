"""GPU work decomposition, target-neutral: tiles, vector widths, head batches, launch shapes.

Every numeric decision a GPU kernel's shape depends on is made here, for any GPU target (CUDA
today); the target only spells the result. Nothing here imports a GPU library, so all of it is
checked on machines without a GPU.

RoPE work decomposition
-----------------------
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

from ropegen.lower.abi import Param
from ropegen.ops.plan import RmsNormPlan, RopePlan

VECTOR_BYTES = 16          # one 128-bit load / store per vector
ROPE_BLOCK = 256           # threads per block of the RoPE kernels
ROPE_MIN_BLOCKS = 4        # __launch_bounds__(256, 4): at most 64 registers, half of an SM's threads
ROPE_REGISTERS = 65536 // (ROPE_BLOCK * ROPE_MIN_BLOCKS)
ROPE_FIXED_REGISTERS = 44  # indices, pointers, strides, loop state (from ptxas -v)
MAX_ANGLE_REGISTERS = 16   # cos and sin of one tile (8 pairs' worth in float)
MAX_HEAD_BATCH = 4         # head units whose loads are issued before any store (memory parallelism)
# Resident threads wanted in flight: about half of an H100's 132 SMs x 2048 threads. Fewer
# token-tiles than this and the heads are split into groups (each group recomputes its angles).
TARGET_THREADS = 1 << 17
MAX_HEAD_GROUPS = 8
RMS_MAX_BLOCK = 1024
RMS_VECTORS_PER_THREAD = 4  # aim: each thread of an RMSNorm block owns about this many vectors
RMS_MAX_CACHED = 16         # vectors per thread kept in registers between the two passes


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


# ---------------------------------------------------------------------------------------------
# RoPE kernels: head streams, the two kernels' shapes, launch

@dataclass(frozen=True)
class HeadStream:
    """One rotated (or copied) tensor of a RoPE launch; all streams' head units numbered in order."""

    out: str
    src: str
    rotate: bool
    heads: int             # head units (heads * units per head)
    split: int             # units per real head
    first: int             # global head-unit numbers first..last-1
    last: int
    x: str                 # identifiers of the input and output pointers
    y: str


def head_streams(p: RopePlan) -> tuple[HeadStream, ...]:
    tensors = {t.name: t for t in p.inputs}
    out = []
    first = 0
    for s in p.streams:
        t = tensors[s.src]
        assert t.heads is not None
        out.append(HeadStream(s.out, s.src, s.rotate, t.heads, t.unit_split, first, first + t.heads,
                              f"x_{s.out}", f"y_{s.out}"))
        first += t.heads
    return tuple(out)


@dataclass(frozen=True)
class RopeKernel:
    name: str              # the exported symbol
    vector: int            # elements per vector (1: the scalar kernel)
    groups: tuple[TileGroup, ...]
    params: tuple[Param, ...]
    strided: bool          # element (head_dim) strides are parameters (scalar kernel)
    head_batch: int        # head units loaded before the first store

    @property
    def n_tiles(self) -> int:
        return self.groups[-1].end

    @property
    def batched(self) -> bool:
        return self.head_batch > 1


def _registers(groups: tuple[TileGroup, ...], v: int, itemsize: int, acc_regs: int, heads: int) -> int:
    """A conservative estimate of a RoPE kernel's registers with `heads` heads in flight."""
    slots = max(g.n_slots for g in groups)
    n_vec = max(g.n_vec for g in groups)
    per_vector = max(1, v * itemsize // 4)
    per_head = n_vec * (2 * per_vector + 2)     # loaded and rotated vectors, 64-bit addresses
    return ROPE_FIXED_REGISTERS + 2 * slots * acc_regs + heads * per_head


def head_batch(groups: tuple[TileGroup, ...], v: int, itemsize: int, acc_regs: int) -> int:
    """Heads in flight per thread, as many as fit the register budget next to the angle slots
    (ROPE_MIN_BLOCKS blocks per SM keep enough loads in flight even at one head)."""
    hb = MAX_HEAD_BATCH
    while hb > 1 and _registers(groups, v, itemsize, acc_regs, hb) > ROPE_REGISTERS:
        hb //= 2
    return hb


def rope_kernels(p: RopePlan, vec_params: tuple[Param, ...], scalar_params: tuple[Param, ...]
                 ) -> tuple[RopeKernel, RopeKernel]:
    """The vector kernel and the scalar kernel (any strides: the fallback path, one head at a
    time, never a spill)."""
    v = vector_width(p)
    vec_groups = group_tiles(tiles(element_map(p), v))  # type: ignore[arg-type]
    vec = RopeKernel(f"{p.name}_vec", v, vec_groups, vec_params, False,
                     head_batch(vec_groups, v, p.storage.itemsize, acc_registers(p)))
    scal = RopeKernel(f"{p.name}_scalar", 1, group_tiles(scalar_tiles(p)), scalar_params, True, 1)
    return vec, scal


@dataclass(frozen=True)
class Launch:
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    head_groups: int


def head_groups(cfg, kernel: RopeKernel, tokens: int) -> int:
    """Split the heads of a token over several threads only when tokens alone leave the GPU idle."""
    threads = max(1, tokens * kernel.n_tiles)
    most = max(1, min(MAX_HEAD_GROUPS, cfg.total_heads // kernel.head_batch))
    return max(1, min(most, -(-TARGET_THREADS // threads)))


def rope_launch(cfg, kernel: RopeKernel, tokens: int, n_seq: int = 0) -> Launch:
    """Grid and block for `tokens` tokens (and `n_seq` sequence lengths to validate); `cfg` is a
    target's RoPE configuration (its `total_heads` and `block`)."""
    groups = head_groups(cfg, kernel, tokens)
    threads = max(tokens * kernel.n_tiles, n_seq, 1)
    blocks = -(-threads // cfg.block)
    if blocks > 2**31 - 1:
        raise ValueError(f"{tokens} tokens need {blocks} thread blocks, more than a grid holds")
    return Launch((blocks, groups, 1), (cfg.block, 1, 1), groups)


def rope_vector_ok(v: int, itemsize: int, tensors: list[tuple[int, dict[str, int]]]) -> bool:
    """Every rotated input and output: address aligned to a whole vector, element stride 1 and
    token/head strides multiples of the vector (so every vector of every head stays aligned)."""
    if v == 1:
        return False
    for ptr, strides in tensors:
        if ptr % (v * itemsize) or strides["d"] != 1:
            return False
        if any(strides[r] % v for r in ("b", "s", "h")):
            return False
    return True


# ---------------------------------------------------------------------------------------------
# RMSNorm kernels: one block per row

@dataclass(frozen=True)
class RmsKernel:
    name: str
    vector: int
    block: int
    items: int             # vectors per thread
    cache: bool            # keep the row's vectors in registers between the two passes
    params: tuple[Param, ...]
    n_vectors: int         # vectors per row
    warps: int


def rms_kernel(p: RmsNormPlan, name: str, v: int, params: tuple[Param, ...]) -> RmsKernel:
    nv = p.norm_size // v
    block = min(RMS_MAX_BLOCK, max(32, 32 * -(-nv // (32 * RMS_VECTORS_PER_THREAD))))
    items = -(-nv // block)
    return RmsKernel(name, v, block, items, items <= RMS_MAX_CACHED, params, nv, block // 32)


def rms_vector_width(p: RmsNormPlan) -> int:
    widest = max(p.x.itemsize, p.scale.itemsize, p.y.itemsize)
    v = max(1, VECTOR_BYTES // widest)
    while v > 1 and p.norm_size % v:
        v //= 2
    return v


def rms_launch(k: RmsKernel, rows: int) -> Launch:
    blocks = max(1, min(rows, 2**31 - 1))   # the kernel strides over rows beyond the grid
    return Launch((blocks, 1, 1), (k.block, 1, 1), 1)


def rms_vector_ok(k: RmsKernel, pointers: list[tuple[int, int]], row_strides: list[int]) -> bool:
    """pointers: (address, itemsize) of x and y; rows start at multiples of the row strides."""
    if k.vector == 1:
        return False
    return all(ptr % (k.vector * size) == 0 for ptr, size in pointers) and all(s % k.vector == 0 for s in row_strides)
