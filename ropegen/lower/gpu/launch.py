"""GPU kernel shapes and launches for any GPU target: head streams, the RoPE and RMSNorm kernels'
vector widths, head batches and blocks (a register budget, not a compiler's report), launch grids,
and whether a call's arrays allow the vector kernel.

Every number a kernel's shape depends on is decided here; the target only spells the result.
Nothing here imports a GPU library, so all of it is checked on machines without a GPU.
"""
from __future__ import annotations

from dataclasses import dataclass

from ropegen.lower.abi import Param
from ropegen.lower.gpu.tiles import (VECTOR_BYTES, TileGroup, acc_registers, element_map, group_tiles,
                                     scalar_tiles, tiles, vector_width)
from ropegen.ops.plan import RmsNormPlan, RopePlan
from ropegen.ops.rope.head_norm import HeadNormPlan

ROPE_BLOCK = 256           # threads per block of the RoPE kernels
ROPE_MIN_BLOCKS = 4        # __launch_bounds__(256, 4): at most 64 registers, half of an SM's threads
ROPE_REGISTERS = 65536 // (ROPE_BLOCK * ROPE_MIN_BLOCKS)
# a whole-head kernel (a stream normalized per head: one thread runs every tile of a head, after the
# head's sum of squares) holds more live values: (256, 2) lets it have 128 registers instead of spilling
ROPE_MIN_BLOCKS_WHOLE_HEAD = 2
ROPE_FIXED_REGISTERS = 44  # indices, pointers, strides, loop state (from ptxas -v)
MAX_HEAD_BATCH = 4         # head units whose loads are issued before any store (memory parallelism)
# Resident threads wanted in flight: about half of an H100's 132 SMs x 2048 threads. Fewer
# token-tiles than this and the heads are split into groups (each group recomputes its angles).
TARGET_THREADS = 1 << 17
MAX_HEAD_GROUPS = 8
RMS_MAX_BLOCK = 1024
RMS_VECTORS_PER_THREAD = 4  # aim: each thread of an RMSNorm block owns about this many vectors
RMS_MAX_CACHED = 16         # vectors per thread kept in registers between the two passes



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
    head_batch: int        # head units loaded before the first store
    # one thread runs every tile of its token's heads (an operator with a per-head norm: each
    # head's sum of squares is read before any of it is stored, so in place is race-free)
    whole_head: bool = False
    # a stream normalized over all of a token's heads (OLMo 2): its sum needs every head before any
    # is stored, so one thread runs all heads of its token (head_groups 1)
    over_heads: bool = False

    @property
    def n_tiles(self) -> int:
        return self.groups[-1].end

    @property
    def threads_per_token(self) -> int:
        return 1 if self.whole_head else self.n_tiles

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
    whole = any(s.norm for s in p.streams)
    over = any(s.norm and s.norm.over_heads for s in p.streams)
    vec = RopeKernel(f"{p.name}_vec", v, vec_groups, vec_params, False,
                     head_batch(vec_groups, v, p.storage.itemsize, acc_registers(p)), whole, over)
    scal = RopeKernel(f"{p.name}_scalar", 1, group_tiles(scalar_tiles(p)), scalar_params, True, 1, whole, over)
    return vec, scal


@dataclass(frozen=True)
class Launch:
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    head_groups: int


def head_groups(cfg, kernel: RopeKernel, tokens: int) -> int:
    """Split the heads of a token over several threads only when tokens alone leave the GPU idle
    (a whole-head kernel always gives each thread one real head, or all of them when a stream is
    normalized over its heads: gpu/_head_norm.inc.j2)."""
    if kernel.over_heads:
        return 1
    if kernel.whole_head:
        return max(1, cfg.real_heads)
    threads = max(1, tokens * kernel.threads_per_token)
    most = max(1, min(MAX_HEAD_GROUPS, cfg.total_heads // kernel.head_batch))
    return max(1, min(most, -(-TARGET_THREADS // threads)))


def rope_launch(cfg, kernel: RopeKernel, tokens: int, n_seq: int = 0) -> Launch:
    """Grid and block for `tokens` tokens (and `n_seq` sequence lengths to validate); `cfg` is a
    target's RoPE configuration (its `total_heads` and `block`)."""
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
    # with a residual the cache holds each element's sum in the stash type, wider than x: it may
    # take no more registers than RMS_MAX_CACHED full vectors (without one it holds x's vectors)
    cached = p.stash.itemsize if p.residual else p.x.itemsize
    cache = items <= RMS_MAX_CACHED and items * v * cached <= RMS_MAX_CACHED * VECTOR_BYTES
    return RmsKernel(name, v, block, items, cache, params, nv, block // 32)


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
    """pointers: (address, itemsize) of every row-indexed array (x, y[, residual, h]); rows start
    at multiples of the row strides."""
    if k.vector == 1:
        return False
    return all(ptr % (k.vector * size) == 0 for ptr, size in pointers) and all(s % k.vector == 0 for s in row_strides)
