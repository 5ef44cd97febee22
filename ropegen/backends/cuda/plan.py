"""Every numeric decision of the CUDA backend, made in Python: tiles, vector widths, launch shapes.

The CUDA templates only print what this module computes. Nothing here imports CuPy, so all of it
(tile decomposition, kernel parameter lists, grid and block shapes) is checked on machines
without a GPU.

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

import numpy as np

from ropegen import ir
from ropegen.ir.dtypes import DType
from ropegen.ops.plan import ExactAngles, RmsNormPlan, RopePlan, TableAnglesPlan
from ropegen.render import c_double, c_float

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

ERR_POSITION = 1            # a position (table row) outside [0, rows)
ERR_SEQUENCES = 2           # sequence lengths negative, or not summing to the packed tokens

# Angles are reduced to turns in double, u = theta / (2 pi), then sin(pi * 2(u - rint(u))) comes
# from sincospi(f): no Payne-Hanek path, no local memory, for any angle.
INV_TWO_PI = 0.15915494309189535   # 1 / (2 pi), the double nearest to it
TWO_PI = 6.283185307179586


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


def vector_width(p: RopePlan, acc: str) -> int:
    """Largest power-of-two vector (at most 16 bytes) that tiles the unit with at most
    MAX_ANGLE_REGISTERS registers of cos/sin per thread (more spills next to the vectors)."""
    emap = element_map(p)
    acc_regs = 2 if acc == "double" else 1
    v = max(1, VECTOR_BYTES // p.storage.itemsize)
    while v > 1:
        ts = tiles(emap, v)
        if ts is not None and 2 * max(len(t.cols) for t in ts) * acc_regs <= MAX_ANGLE_REGISTERS:
            return v
        v //= 2
    return 1


# ---------------------------------------------------------------------------------------------
# kernel parameters: one list drives the printed signature and the wrapper's argument tuple

@dataclass(frozen=True)
class Param:
    """One kernel parameter. `source` tells the wrapper what to pass:

    ("in", tensor)            device pointer of an input
    ("out", output)           device pointer of an output
    ("stride", name, role)    element stride of a rotated input or of an output along b, s, h or d
                              (real heads; a merged (heads, head_dim) axis is split)
    ("axis_stride", name, i)  element stride of axis i of an input
    ("zero",)                 0 (the batch stride of packed-token tensors)
    ("extent", name, i)       size of axis i of an input
    ("launch", key)           tokens, seq_len, head_groups, rows, x_row_stride, y_row_stride
    ("err",)                  the device error word
    ("seq_ends",)             int64 inclusive prefix sums of the sequence lengths
    """

    name: str
    ctype: str
    source: tuple

    @property
    def is_pointer(self) -> bool:
        return self.ctype.endswith("*")


def _ptr(dtype: DType, const: bool) -> str:
    return f"{'const ' if const else ''}{dtype.cuda_type}*"


# ---------------------------------------------------------------------------------------------
# RoPE configuration

@dataclass(frozen=True)
class StreamCfg:
    out: str
    src: str
    rotate: bool
    heads: int             # head units (heads * units per head)
    split: int             # units per real head
    first: int             # global head-unit numbers first..last-1 (all streams numbered in order)
    last: int
    x: str                 # C names of the input and output pointers
    y: str


@dataclass(frozen=True)
class RopeKernelCfg:
    name: str              # the extern "C" symbol
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


def _registers(groups: tuple[TileGroup, ...], v: int, itemsize: int, acc: str, heads: int) -> int:
    """A conservative estimate of a RoPE kernel's registers with `heads` heads in flight."""
    acc_regs = 2 if acc == "double" else 1
    slots = max(g.n_slots for g in groups)
    n_vec = max(g.n_vec for g in groups)
    per_vector = max(1, v * itemsize // 4)
    per_head = n_vec * (2 * per_vector + 2)     # loaded and rotated vectors, 64-bit addresses
    return ROPE_FIXED_REGISTERS + 2 * slots * acc_regs + heads * per_head


def head_batch(groups: tuple[TileGroup, ...], v: int, itemsize: int, acc: str) -> int:
    """Heads in flight per thread, as many as fit the register budget next to the angle slots
    (ROPE_MIN_BLOCKS blocks per SM keep enough loads in flight even at one head)."""
    hb = MAX_HEAD_BATCH
    while hb > 1 and _registers(groups, v, itemsize, acc, hb) > ROPE_REGISTERS:
        hb //= 2
    return hb


@dataclass(frozen=True)
class RopeCfg:
    plan: RopePlan
    storage: str           # CUDA storage type
    acc: str               # arithmetic type
    round_storage: bool    # round each product (and angle) to storage (compute = storage)
    mul: str               # correctly rounded, never contracted intrinsics of the arithmetic type
    add: str
    sub: str
    angle_mode: str        # table | exact | ggml
    angle_double: bool     # exact angles: sincos in double (compute f64), else reduce then sincosf
    trig_fast: bool
    streams: tuple[StreamCfg, ...]
    total_heads: int
    block: int
    min_blocks: int
    vec: RopeKernelCfg
    scalar: RopeKernelCfg
    table_dtype: DType | None
    ff_dtype: DType | None
    consts: dict           # printed constants (c_double / c_float literals in the template)
    sincos: str            # sincosf, or __sincosf when the spec opts into fast trig
    start_expr: str        # C expressions of the arange / glm2d scalars (literals or device reads)
    pad_expr: str
    first_expr: str

    @property
    def kernels(self) -> tuple[RopeKernelCfg, ...]:
        return (self.vec, self.scalar)

    err_position = ERR_POSITION
    err_sequences = ERR_SEQUENCES


def _float_ops(t: str) -> tuple[str, str, str]:
    return ("__dmul_rn", "__dadd_rn", "__dsub_rn") if t == "double" else ("__fmul_rn", "__fadd_rn", "__fsub_rn")


def rope_cfg(p: RopePlan) -> RopeCfg:
    tensors = {t.name: t for t in p.inputs}
    acc = "double" if p.compute.name == "f64" else "float"
    round_storage = p.compute_storage_rounding and p.storage.name in ("f16", "bf16")
    mul, add, sub = _float_ops(acc)
    if isinstance(p.angles, TableAnglesPlan):
        mode = "table"
    elif isinstance(p.angles, ExactAngles):
        mode = "exact"
    else:
        mode = "ggml"
    streams = []
    first = 0
    for s in p.streams:
        t = tensors[s.src]
        assert t.heads is not None
        streams.append(StreamCfg(s.out, s.src, s.rotate, t.heads, t.unit_split, first, first + t.heads,
                                 f"x_{s.out}", f"y_{s.out}"))
        first += t.heads
    emap = element_map(p)
    v = vector_width(p, acc)
    vec_groups = group_tiles(tiles(emap, v))  # type: ignore[arg-type]
    scalar_groups = group_tiles(scalar_tiles(p))
    pos = p.positions

    def scalar_expr(v) -> str:
        if v is None:
            return "0"
        return f"{int(v)}LL" if isinstance(v, int) else f"(long long)(t_{v}[0])"
    consts: dict = {}
    table_dtype = ff_dtype = None
    if isinstance(p.angles, TableAnglesPlan):
        table_dtype = tensors[p.angles.cos].dtype
    elif isinstance(p.angles, ExactAngles):
        consts = dict(inv_freq=p.angles.inv_freq, magnitude=p.angles.magnitude,
                      magnitude_f=float(np.float32(p.angles.magnitude)),
                      two_pi=TWO_PI, inv_two_pi=INV_TWO_PI)
        if p.angles.freq_factors:
            ff_dtype = tensors[p.angles.freq_factors].dtype
    else:
        a = p.angles
        consts = dict(theta_scale=a.theta_scale, freq_scale=a.freq_scale, mscale=a.mscale,
                      ramp=a.ramp, one_minus_ramp=a.one_minus_ramp, inv_two_pi=INV_TWO_PI)
        if a.freq_factors:
            ff_dtype = tensors[a.freq_factors].dtype
    base = dict(plan=p, storage=p.storage.cuda_type, acc=acc, round_storage=round_storage,
                mul=mul, add=add, sub=sub, angle_mode=mode,
                angle_double=(mode == "exact" and acc == "double"), trig_fast=p.trig_fast,
                streams=tuple(streams), total_heads=first, block=ROPE_BLOCK, min_blocks=ROPE_MIN_BLOCKS,
                table_dtype=table_dtype, ff_dtype=ff_dtype, consts=consts,
                sincos="__sincosf" if p.trig_fast else "sincosf",
                start_expr=scalar_expr(pos.start), first_expr=scalar_expr(pos.first_seqlen),
                pad_expr=f"(long long)(t_{pos.pad}[b * t_{pos.pad}_si])" if pos.pad else "0LL")
    size = p.storage.itemsize
    vec = RopeKernelCfg(f"{p.name}_vec", v, vec_groups, _rope_params(p, tuple(streams), False), False,
                        head_batch(vec_groups, v, size, acc))
    # the scalar kernel (any strides) is the fallback path: one head at a time, never a spill
    scal = RopeKernelCfg(f"{p.name}_scalar", 1, scalar_groups, _rope_params(p, tuple(streams), True), True, 1)
    return RopeCfg(vec=vec, scalar=scal, **base)


def _rope_params(p: RopePlan, streams: tuple[StreamCfg, ...], strided: bool) -> tuple[Param, ...]:
    tensors = {t.name: t for t in p.inputs}
    ps: list[Param] = []
    roles = ("b", "s", "h", "d") if strided else ("b", "s", "h")
    for s in streams:
        dt = tensors[s.src].dtype
        ps.append(Param(s.x, _ptr(dt, True), ("in", s.src)))
        ps.append(Param(s.y, _ptr(dt, False), ("out", s.out)))
        for r in roles:
            ps.append(Param(f"{s.x}_s{r}", "long long", ("stride", s.src, r)))
        for r in roles:
            ps.append(Param(f"{s.y}_s{r}", "long long", ("stride", s.out, r)))
    pos = p.positions

    def lead(name: str, n: int) -> list[tuple]:
        """(b, s) stride sources of a tensor whose first n axes are the token dims, in the memory
        order of the rotated tensors' token dims ([seq, batch] when the plan's token order is "sb")."""
        rank = len(p.ir.tensor(name).axes)
        if n == 1:
            return [("zero",), ("axis_stride", name, 0)]
        assert rank >= 2
        if p.token_order == "sb":
            return [("axis_stride", name, 1), ("axis_stride", name, 0)]
        return [("axis_stride", name, 0), ("axis_stride", name, 1)]

    n_token_dims = 1 if p.token_layout == "t" else 2
    if pos.ids:
        sb, ss = lead(pos.ids, n_token_dims)
        ps += [Param("t_" + pos.ids, _ptr(tensors[pos.ids].dtype, True), ("in", pos.ids)),
               Param(f"t_{pos.ids}_sb", "long long", sb),
               Param(f"t_{pos.ids}_ss", "long long", ss)]
    for v in dict.fromkeys((pos.start, pos.first_seqlen)):
        if isinstance(v, str):
            ps.append(Param("t_" + v, _ptr(tensors[v].dtype, True), ("in", v)))
    if pos.pad:
        ps += [Param("t_" + pos.pad, _ptr(tensors[pos.pad].dtype, True), ("in", pos.pad)),
               Param(f"t_{pos.pad}_si", "long long", ("axis_stride", pos.pad, 0))]
    if p.sequences:
        ps += [Param("t_" + p.sequences, _ptr(tensors[p.sequences].dtype, True), ("in", p.sequences)),
               Param(f"t_{p.sequences}_si", "long long", ("axis_stride", p.sequences, 0)),
               Param("n_seq", "long long", ("extent", p.sequences, 0)),
               Param("seq_ends", "const long long*", ("seq_ends",))]
    a = p.angles
    if isinstance(a, TableAnglesPlan):
        for name in (a.cos, a.sin):
            ps.append(Param("t_" + name, _ptr(tensors[name].dtype, True), ("in", name)))
            last = len(p.ir.tensor(name).axes) - 1
            if a.per_token:
                sb, ss = lead(name, n_token_dims)
                ps += [Param(f"t_{name}_sb", "long long", sb), Param(f"t_{name}_ss", "long long", ss)]
            else:
                ps.append(Param(f"t_{name}_sr", "long long", ("axis_stride", name, 0)))
            ps.append(Param(f"t_{name}_sc", "long long", ("axis_stride", name, last)))
        if not a.per_token:
            ps.append(Param("n_rows", "long long", ("extent", a.cos, 0)))
    elif a.freq_factors:
        ps += [Param("t_" + a.freq_factors, _ptr(tensors[a.freq_factors].dtype, True), ("in", a.freq_factors)),
               Param(f"t_{a.freq_factors}_si", "long long", ("axis_stride", a.freq_factors, 0))]
    ps += [Param("n_tokens", "long long", ("launch", "tokens")),
           Param("seq_len", "long long", ("launch", "seq_len")),
           Param("head_groups", "int", ("launch", "head_groups")),
           Param("err", "int*", ("err",))]
    names = [x.name for x in ps]
    if len(set(names)) != len(names):
        raise AssertionError(f"{p.name}: kernel parameter names collide: {names}")
    return tuple(ps)


@dataclass(frozen=True)
class Launch:
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    head_groups: int


def head_groups(cfg: RopeCfg, kernel: RopeKernelCfg, tokens: int) -> int:
    """Split the heads of a token over several threads only when tokens alone leave the GPU idle."""
    threads = max(1, tokens * kernel.n_tiles)
    most = max(1, min(MAX_HEAD_GROUPS, cfg.total_heads // kernel.head_batch))
    return max(1, min(most, -(-TARGET_THREADS // threads)))


def rope_launch(cfg: RopeCfg, kernel: RopeKernelCfg, tokens: int, n_seq: int = 0) -> Launch:
    """Grid and block for `tokens` tokens (and `n_seq` sequence lengths to validate)."""
    groups = head_groups(cfg, kernel, tokens)
    threads = max(tokens * kernel.n_tiles, n_seq, 1)
    blocks = -(-threads // cfg.block)
    if blocks > 2**31 - 1:
        raise ValueError(f"{tokens} tokens need {blocks} thread blocks, more than a grid holds")
    return Launch((blocks, groups, 1), (cfg.block, 1, 1), groups)


# ---------------------------------------------------------------------------------------------
# RMSNorm configuration

@dataclass(frozen=True)
class RmsKernelCfg:
    name: str
    vector: int
    block: int
    items: int             # vectors per thread
    cache: bool            # keep the row's vectors in registers between the two passes
    params: tuple[Param, ...]
    n_vectors: int         # vectors per row
    warps: int


@dataclass(frozen=True)
class RmsCfg:
    plan: RmsNormPlan
    x: str
    scale: str
    y: str
    stash: str
    product: str
    stash_mul: str
    stash_add: str
    stash_div: str
    stash_sqrt: str
    product_mul: str
    epsilon: str           # epsilon as a literal of the stash type
    scale_direct: bool     # scale index = element index (no broadcasting)
    scale_dims: tuple[tuple[int, int], ...]   # (size, stride) innermost first, for broadcasting
    vec: RmsKernelCfg
    scalar: RmsKernelCfg

    @property
    def kernels(self) -> tuple[RmsKernelCfg, ...]:
        return (self.vec, self.scalar)


def _rms_kernel(p: RmsNormPlan, name: str, v: int) -> RmsKernelCfg:
    nv = p.norm_size // v
    block = min(RMS_MAX_BLOCK, max(32, 32 * -(-nv // (32 * RMS_VECTORS_PER_THREAD))))
    items = -(-nv // block)
    params = (Param("t_" + p.inputs[0].name, _ptr(p.x, True), ("in", p.inputs[0].name)),
              Param("t_" + p.inputs[1].name, _ptr(p.scale, True), ("in", p.inputs[1].name)),
              Param("t_" + p.out, _ptr(p.y, False), ("out", p.out)),
              Param("n_rows", "long long", ("launch", "rows")),
              Param("x_row_stride", "long long", ("launch", "x_row_stride")),
              Param("y_row_stride", "long long", ("launch", "y_row_stride")))
    return RmsKernelCfg(name, v, block, items, items <= RMS_MAX_CACHED, params, nv, block // 32)


def rms_vector_width(p: RmsNormPlan) -> int:
    widest = max(p.x.itemsize, p.scale.itemsize, p.y.itemsize)
    v = max(1, VECTOR_BYTES // widest)
    while v > 1 and p.norm_size % v:
        v //= 2
    return v


def rms_cfg(p: RmsNormPlan) -> RmsCfg:
    product = p.product.cuda_type
    stash = p.stash.cuda_type
    padded = p.padded_scale_shape
    direct = tuple(padded) == tuple(p.norm_shape)
    dims = tuple((n, s) for n, s in zip(reversed(p.norm_shape), reversed(p.scale_strides)))
    eps = c_float(p.epsilon_stash) if stash == "float" else c_double(p.epsilon_stash)
    d = stash == "double"
    return RmsCfg(
        plan=p, x=p.x.cuda_type, scale=p.scale.cuda_type, y=p.y.cuda_type, stash=stash, product=product,
        stash_mul=_float_ops(stash)[0], stash_add=_float_ops(stash)[1],
        stash_div="__ddiv_rn" if d else "__fdiv_rn", stash_sqrt="__dsqrt_rn" if d else "__fsqrt_rn",
        product_mul=_float_ops(product)[0], epsilon=eps,
        scale_direct=direct, scale_dims=dims,
        vec=_rms_kernel(p, f"{p.name}_vec", rms_vector_width(p)),
        scalar=_rms_kernel(p, f"{p.name}_scalar", 1))


def rms_launch(k: RmsKernelCfg, rows: int) -> Launch:
    blocks = max(1, min(rows, 2**31 - 1))   # the kernel strides over rows beyond the grid
    return Launch((blocks, 1, 1), (k.block, 1, 1), 1)


# ---------------------------------------------------------------------------------------------
# runtime choice between the vector and the scalar kernel

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


def rms_vector_ok(k: RmsKernelCfg, pointers: list[tuple[int, int]], row_strides: list[int]) -> bool:
    """pointers: (address, itemsize) of x and y; rows start at multiples of the row strides."""
    if k.vector == 1:
        return False
    return all(ptr % (k.vector * size) == 0 for ptr, size in pointers) and all(s % k.vector == 0 for s in row_strides)


def canonical_strides(t: ir.Tensor, strides: tuple[int, ...], layout: str) -> dict[str, int]:
    """Element strides along b, s, h (real head) and d of a rotated tensor, from the memory strides
    of its axes (a merged (heads, head_dim) axis is split row-major)."""
    per_dim: list[int] = []
    for ax, st in zip(t.axes, strides):
        inner = st
        rev = []
        for d in reversed(ax.parts):
            rev.append(inner)
            if len(ax.parts) > 1:
                inner *= int(d.size)
        per_dim.extend(reversed(rev))
    roles = [d.role for d in t.dims]

    def of(role: ir.Role) -> int:
        return per_dim[roles.index(role)]

    if layout == "t":
        return {"b": 0, "s": of(ir.Role.TOKENS), "h": of(ir.Role.HEADS), "d": of(ir.Role.HEAD_DIM)}
    return {"b": of(ir.Role.BATCH), "s": of(ir.Role.SEQ), "h": of(ir.Role.HEADS), "d": of(ir.Role.HEAD_DIM)}
