"""GPU kernel shapes and launches for any GPU target: head streams, the RoPE and RMSNorm kernels'
vector widths and access bytes, blocks and register budgets, launch grids from the work (head groups
at decode sizes), and whether a call's arrays allow the vector kernel.

Every number a kernel's shape depends on is decided here; the target only spells the result.
Nothing here imports a GPU library, so all of it is checked on machines without a GPU.
"""
from __future__ import annotations

from dataclasses import dataclass

from ropegen.lower.abi import Param
from ropegen.lower.gpu.tiles import (VECTOR_BYTES, TileGroup, element_map, group_tiles, scalar_tiles, tiles,
                                     vector_width)
from ropegen.ops.plan import RmsNormPlan, RopePlan
from ropegen.ops.rope.head_norm import HeadNormPlan

# Threads per block of the RoPE kernels: one block covers 64 token-tiles of one head group
# (rope_launch). At the register budget an SM holds 1024 threads (2048 / 2): 64-thread blocks reach
# that with 16 blocks (under the 32-block limit), and at decode sizes they spread the same work over
# up to 4x the SMs of 256-thread blocks (T = 16, llama3 q+k: 2 x 40 head groups = 80 blocks, not 40).
ROPE_BLOCK = 64
ROPE_REGISTERS = 64        # per thread: half of an SM's threads resident
# a whole-head kernel (a stream normalized per head: one thread runs every tile of a head, after the
# head's sum of squares) holds more live values: 128 registers instead of spilling
ROPE_REGISTERS_WHOLE_HEAD = 128
SM_REGISTERS = 65536
ROPE_MIN_BLOCKS = SM_REGISTERS // (ROPE_BLOCK * ROPE_REGISTERS)       # __launch_bounds__(64, 16)
ROPE_MIN_BLOCKS_WHOLE_HEAD = SM_REGISTERS // (ROPE_BLOCK * ROPE_REGISTERS_WHOLE_HEAD)
# Threads wanted in flight: about what an H100 holds at the budget (132 SMs x 1024). Fewer
# token-tiles than this and the heads of a token are split over that many more threads (head groups,
# each recomputing its tokens' angles), down to one head unit per thread: the grid follows the work,
# head-parallel at decode sizes, token-parallel at prefill sizes.
TARGET_THREADS = 1 << 17
MAX_GRID_Y = 65535         # the head groups are the grid's y extent
RMS_MAX_BLOCK = 1024
# Each thread of an RMSNorm block owns about RMS_VECTORS_PER_THREAD vectors, and at most
# RMS_ELEMENTS_PER_THREAD elements: at decode sizes a row's time is its threads' serial work (their part
# of the sum, the reduction, the scaling), at prefill sizes the bytes each thread has in flight. On an
# H200 (bench/results/cuda_rmsnorm_ab_h200_s13.txt), bf16 rows of 4096 in 8-element vectors ran 1.2-1.4x
# faster at 1-512 rows with 2 vectors per thread than with 4 (and 3% faster at 16384), while f32
# (4-element vectors) gained nothing from fewer, and the scalar kernels, given 16 elements per thread
# instead of 4, lost 1.5-2.3x in bf16 and 1.6x at 1-64 rows in f32
RMS_VECTORS_PER_THREAD = 4
RMS_ELEMENTS_PER_THREAD = 16
# A cached row's scale vectors are loaded once per thread, before the row loop (not after each row's
# sum: a decode-sized row then waits for one memory round trip, not two), when the thread's x vectors
# come to at least this many bytes. Below it, the scale's registers cost occupancy that the kernel
# needs for its bytes in flight: on the H200, f32 rows of 4096 (64 bytes a thread) ran 1.25-1.35x
# faster at 1-64 rows with the scale loaded first and no slower at 16384; bf16 (32 bytes a thread)
# 4% faster at 1-64 rows and 8% slower at 16384
RMS_PRELOAD_BYTES = 64
RMS_MAX_CACHED = 16         # vectors per thread kept in registers between the two passes ...
# ... and at most this share of the registers __launch_bounds__(block) leaves a thread (the rest:
# pointers, the loop, the sum and the vectors in flight); a longer row is read twice instead of spilling
RMS_CACHE_SHARE = 2
# Rows of at most 32 such shares (per-head norms [T*32, 128]) are summed within
# a warp: a row has min(32, its vectors rounded up to a power of two) lanes, so no lane of a 16-vector
# row idles, the sum is shuffles only, and a block holds this many threads' worth of rows
RMS_ROWS_BLOCK = 128



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
    norm: HeadNormPlan | None = None   # the per-head rmsnorm before the rotation
    scale: str = ""        # an fp8 output's scale input (its real head's entry, or entry 0)
    scale_per_head: bool = False
    norm_size: int = 0     # elements one norm sums: head_dim, or heads * head_dim over all heads

    @property
    def real_heads(self) -> int:
        return self.heads // self.split


def head_streams(p: RopePlan) -> tuple[HeadStream, ...]:
    tensors = {t.name: t for t in p.inputs}
    out = []
    first = 0
    scales = p.quant_scales or ("",) * len(p.streams)
    for s, scale in zip(p.streams, scales):
        t = tensors[s.src]
        assert t.heads is not None
        per_head = bool(scale) and p.ir.tensor(scale).axes[0].size != 1
        size = p.head_dim * (t.real_heads if s.norm and s.norm.over_heads else 1)
        out.append(HeadStream(s.out, s.src, s.rotate, t.heads, t.unit_split, first, first + t.heads,
                              f"x_{s.out}", f"y_{s.out}", s.norm, scale, per_head, size))
        first += t.heads
    return tuple(out)


@dataclass(frozen=True)
class RopeKernel:
    name: str              # the exported symbol
    vector: int            # elements per vector (1: the scalar kernel)
    groups: tuple[TileGroup, ...]
    params: tuple[Param, ...]
    strided: bool          # element (head_dim) strides are parameters (scalar kernel)
    # one thread runs every tile of its token's heads (an operator with a per-head norm: each
    # head's sum of squares is read before any of it is stored, so in place is race-free)
    whole_head: bool = False
    # a stream normalized over all of a token's heads (OLMo 2): its sum needs every head before any
    # is stored, so one thread runs all heads of its token (head_groups 1)
    over_heads: bool = False
    itemsize: int = 0      # bytes of an element of x
    out_itemsize: int = 0  # ... and of y (an fp8 output: 1; a target without vectors of it stores elements)

    @property
    def n_tiles(self) -> int:
        return self.groups[-1].end

    @property
    def threads_per_token(self) -> int:
        return 1 if self.whole_head else self.n_tiles

    @property
    def access_bytes(self) -> int:
        """Bytes of one vector load of x: one global access, 16 where the tiling allows, 8 where it
        needs narrower vectors (ATB, compute f64); 0: element accesses."""
        return self.vector * self.itemsize if self.vector > 1 else 0

    @property
    def store_bytes(self) -> int:
        """Bytes of one vector store of y (an fp8 y: a quarter or an eighth of the load)."""
        return self.vector * self.out_itemsize if self.vector > 1 else 0


def rope_kernels(p: RopePlan, vec_params: tuple[Param, ...], scalar_params: tuple[Param, ...]
                 ) -> tuple[RopeKernel, RopeKernel]:
    """The vector kernel and the scalar kernel (any strides: the fallback path, one head at a
    time, never a spill)."""
    v = vector_width(p)
    vec_groups = group_tiles(tiles(element_map(p), v))  # type: ignore[arg-type]
    whole = any(s.norm for s in p.streams)
    over = any(s.norm and s.norm.over_heads for s in p.streams)
    size, out = p.storage.itemsize, (p.out_dtype or p.storage).itemsize
    vec = RopeKernel(f"{p.name}_vec", v, vec_groups, vec_params, False, whole, over, size, out)
    scal = RopeKernel(f"{p.name}_scalar", 1, group_tiles(scalar_tiles(p)), scalar_params, True, whole, over,
                      size, out)
    return vec, scal


@dataclass(frozen=True)
class Launch:
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    head_groups: int


def head_groups(cfg, kernel: RopeKernel, tokens: int) -> int:
    """How many threads share the heads of one token-tile: as few as keep TARGET_THREADS busy, at
    most one per head unit (a whole-head kernel: per real head; a stream normalized over its heads:
    one, gpu/_head_norm.inc.j2)."""
    if kernel.over_heads:
        return 1
    most = max(1, min(MAX_GRID_Y, cfg.real_heads if kernel.whole_head else cfg.total_heads))
    per_group = max(1, tokens * kernel.threads_per_token)
    return max(1, min(most, -(-TARGET_THREADS // per_group)))


def rope_launch(cfg, kernel: RopeKernel, tokens: int, n_seq: int = 0) -> Launch:
    """Grid and block for `tokens` tokens (and `n_seq` sequence lengths to validate); `cfg` is a
    target's RoPE configuration (its `total_heads`, `real_heads` and `block`). x: one thread per
    (token, tile); y: the head groups (gpu/_rope.inc.j2)."""
    groups = head_groups(cfg, kernel, tokens)
    threads = max(tokens * kernel.threads_per_token, n_seq, 1)
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
# RMSNorm kernels: a block per row, or several short rows per block

@dataclass(frozen=True)
class RmsKernel:
    name: str
    vector: int
    block: int
    items: int             # vectors per lane, at most
    cache: bool            # keep the row's vectors in registers between the two passes
    params: tuple[Param, ...]
    n_vectors: int         # vectors per row
    warps: int
    lanes: int = 0         # threads of a row (a target that sums within warps: gpu/_rmsnorm.inc.j2) ...
    rows: int = 1          # ... and rows of a block (block = rows * lanes)
    preload: bool = False  # a cached row's scale vectors loaded once, before the row loop (where aligned)


def _pow2_at_least(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


def rms_kernel(p: RmsNormPlan, name: str, v: int, params: tuple[Param, ...]) -> RmsKernel:
    nv = p.norm_size // v
    per_thread = max(1, min(RMS_VECTORS_PER_THREAD, RMS_ELEMENTS_PER_THREAD // v))
    if nv <= 32 * per_thread:    # a row within a warp: several rows per block
        lanes = min(32, _pow2_at_least(nv))
        rows = RMS_ROWS_BLOCK // lanes
    else:
        lanes = min(RMS_MAX_BLOCK, 32 * -(-nv // (32 * per_thread)))
        rows = 1
    block = lanes * rows
    items = -(-nv // lanes)
    # with a residual the cache holds each element's sum in the stash type, wider than x: it may
    # take no more registers than RMS_MAX_CACHED full vectors, nor more than its share of the budget
    cached = p.stash.itemsize if p.residual else p.x.itemsize
    budget = min(255, SM_REGISTERS // block) // RMS_CACHE_SHARE * 4     # bytes
    cache = items <= RMS_MAX_CACHED and items * v * cached <= min(RMS_MAX_CACHED * VECTOR_BYTES, budget)
    preload = cache and v > 1 and items * v * p.x.itemsize >= RMS_PRELOAD_BYTES
    return RmsKernel(name, v, block, items, cache, params, nv, block // 32, lanes, rows, preload)


def rms_vector_width(p: RmsNormPlan) -> int:
    widest = max(p.x.itemsize, p.scale.itemsize, p.y.itemsize)
    v = max(1, VECTOR_BYTES // widest)
    while v > 1 and p.norm_size % v:
        v //= 2
    return v


def rms_launch(k: RmsKernel, rows: int) -> Launch:
    """A block per k.rows rows (a target that runs one row per block strides over the rest: the
    kernel's row loop covers any grid)."""
    blocks = max(1, min(-(-rows // k.rows), 2**31 - 1))   # the kernel strides over rows beyond the grid
    return Launch((blocks, 1, 1), (k.block, 1, 1), 1)


def rms_vector_ok(k: RmsKernel, pointers: list[tuple[int, int]], row_strides: list[int]) -> bool:
    """pointers: (address, itemsize) of every row-indexed array (x, y[, residual, h]); rows start
    at multiples of the row strides."""
    if k.vector == 1:
        return False
    return all(ptr % (k.vector * size) == 0 for ptr, size in pointers) and all(s % k.vector == 0 for s in row_strides)
