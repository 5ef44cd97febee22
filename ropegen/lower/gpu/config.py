"""The render configuration of every GPU target: what a GPU kernel template prints for one plan,
in ropegen's words.

Everything here is an identifier, an enum, a dtype name or a number (tiling and launch shapes from
lower/gpu/tiles.py and launch.py, parameter lists from lower/gpu/abi.py); a target's templates spell
the source, looking types and intrinsics up in its own facts (backends/cuda/facts.py), and the
target passes the Param class that spells a parameter's type.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np

from ropegen import exact
from ropegen.lower.abi import Param
from ropegen.lower.gpu import launch as gpu
from ropegen.lower.gpu.abi import rms_params, rope_params
from ropegen.lower.gpu.fp8 import Fp8Cvt, conversions
from ropegen.lower.gpu.launch import HeadStream, RmsKernel, RopeKernel
from ropegen.lower.status import Status
from ropegen.ops.plan import RmsNormPlan, RopePlan

# The error-word bits the kernels set (lower/status.py's table).
ERR_POSITION = int(Status.EPOSITION)
ERR_SEQUENCES = int(Status.ESEQUENCES)

# Angles are reduced to turns in double, u = theta / (2 pi), then sin(pi * 2(u - rint(u))) comes
# from sincospi(f): no Payne-Hanek path, no local memory, for any angle.
INV_TWO_PI = exact.f64(1 / (2 * exact.pi()))                       # 1 / (2 pi), the nearest double
INV_TWO_PI_LO = exact.f64(1 / (2 * exact.pi()) - exact.real(INV_TWO_PI))   # and the rest of it
TWO_PI = exact.f64(2 * exact.pi())
# A per-head norm sums its squares into this many partial sums, then a pairwise tree: the C
# kernel's order (templates/c/_head_norm.inc.j2), so a head's inv_rms is the C kernel's to the bit.
NORM_LANES = 16


class AngleMode(enum.Enum):
    TABLE = "table"         # cos/sin read from tables
    EXACT = "exact"         # theta = position * inv_freq in double, reduced to turns
    GGML = "ggml"           # ggml's float32 running product


class SinCos(enum.Enum):
    """How cos and sin of an angle are evaluated."""

    DOUBLE = "double"       # sincospi in double (exact angles, compute f64)
    ACCURATE = "accurate"   # reduced to turns in double, then sincospif
    FAST = "fast"           # the fast intrinsic (the spec asks for fast trig)


class Rows(enum.Enum):
    """Where a token's cos/sin come from."""

    TOKEN = "token"         # per-token table rows (no positions)
    POSITION = "position"   # table rows indexed by the token's positions
    COMPUTED = "computed"   # computed from the token's positions


class ScalarKind(enum.Enum):
    ZERO = "zero"           # absent
    LITERAL = "literal"     # a constant of the spec
    TENSOR = "tensor"       # an integer input, read on the device (pad: its [batch] entry)


@dataclass(frozen=True)
class PosScalar:
    """An arange / glm2d scalar (start, first_seqlen, pad): the template spells the read."""

    kind: ScalarKind
    value: int = 0
    tensor: str = ""


def _scalar(v: int | str | None) -> PosScalar:
    if v is None:
        return PosScalar(ScalarKind.ZERO)
    if isinstance(v, int):
        return PosScalar(ScalarKind.LITERAL, int(v))
    return PosScalar(ScalarKind.TENSOR, tensor=v)


@dataclass(frozen=True)
class RopeCfg:
    plan: RopePlan
    storage: str           # dtype names of the rotated tensors and of the arithmetic
    acc: str
    round_storage: bool    # round each product (and angle) to storage (compute = storage)
    angle_mode: AngleMode
    rows: Rows
    sincos: SinCos
    streams: tuple[HeadStream, ...]
    total_heads: int
    block: int
    min_blocks: int
    vec: RopeKernel
    scalar: RopeKernel
    consts: dict           # planned float constants (the template formats them)
    start: PosScalar       # arange / glm2d scalars
    first: PosScalar
    pad: PosScalar
    split: int = 1         # rotation units per real head (the same in every stream: one head_dim)
    real_heads: int = 0    # real heads of all streams together
    norm_tail: int = 0     # a per-head norm's elements summed after the full rounds of NORM_LANES

    norm_rest: int = 0     # head_dim % NORM_LANES
    out: str = ""          # fp8 outputs: their dtype name (else the storage type is stored)
    quant: tuple[Fp8Cvt, ...] = ()   # ... and the conversion from acc to it (lower/gpu/fp8.py)
    norm_lanes = NORM_LANES
    norm_tree = tuple(NORM_LANES >> k for k in range(1, NORM_LANES.bit_length()))   # 8, 4, 2, 1

    @property
    def kernels(self) -> tuple[RopeKernel, ...]:
        return (self.vec, self.scalar)

    err_position = ERR_POSITION
    err_sequences = ERR_SEQUENCES


# The planned float constants each angle mode's template macros print (the template formats them).
CONSTS = {
    AngleMode.TABLE: lambda a: {},
    AngleMode.EXACT: lambda a: {"inv_freq": a.inv_freq, "magnitude": a.magnitude,
                                "magnitude_f": float(np.float32(a.magnitude)), "two_pi": TWO_PI,
                                "inv_two_pi": INV_TWO_PI, "inv_two_pi_lo": INV_TWO_PI_LO},
    AngleMode.GGML: lambda a: {"theta_scale": a.theta_scale, "freq_scale": a.freq_scale, "mscale": a.mscale,
                               "ramp": a.ramp, "one_minus_ramp": a.one_minus_ramp, "inv_two_pi": INV_TWO_PI},
}


def angle_mode(p: RopePlan) -> AngleMode:
    return AngleMode(p.angles.kind)   # the angle plan's own word


def rope_cfg(p: RopePlan, param: type[Param] = Param) -> RopeCfg:
    acc = "f64" if p.compute.name == "f64" else "f32"
    mode = angle_mode(p)
    if mode is not AngleMode.TABLE:
        rows = Rows.COMPUTED
    else:
        rows = Rows.TOKEN if p.angles.per_token else Rows.POSITION
    streams = gpu.head_streams(p)
    if mode is AngleMode.EXACT and acc == "f64":
        sincos = SinCos.DOUBLE
    else:
        sincos = SinCos.FAST if p.trig_fast else SinCos.ACCURATE
    consts = CONSTS[mode](p.angles)
    vec, scal = gpu.rope_kernels(p, rope_params(p, streams, False, param), rope_params(p, streams, True, param))
    return RopeCfg(
        plan=p, storage=p.storage.name, acc=acc,
        round_storage=p.compute_storage_rounding and p.storage.name in ("f16", "bf16"),
        angle_mode=mode, rows=rows, sincos=sincos,
        streams=streams, total_heads=streams[-1].last if streams else 0,
        block=gpu.ROPE_BLOCK, vec=vec, scalar=scal, consts=consts,
        min_blocks=gpu.ROPE_MIN_BLOCKS_WHOLE_HEAD if vec.whole_head else gpu.ROPE_MIN_BLOCKS,
        start=_scalar(p.positions.start), first=_scalar(p.positions.first_seqlen),
        pad=_scalar(p.positions.pad), split=p.head_dim // p.unit,
        real_heads=sum(s.heads for s in streams) // (p.head_dim // p.unit),
        norm_tail=p.head_dim - p.head_dim % NORM_LANES, norm_rest=p.head_dim % NORM_LANES,
        out=p.out_dtype.name if p.out_dtype else "", quant=conversions(acc, p.out_dtype))


@dataclass(frozen=True)
class RmsCfg:
    plan: RmsNormPlan
    x: str                 # dtype names
    scale: str
    y: str
    stash: str             # stage one's arithmetic
    product: str           # the scale multiply's arithmetic
    epsilon: float         # epsilon rounded to the stash type (the template spells it)
    scale_direct: bool     # scale index = element index (no broadcasting)
    scale_dims: tuple[tuple[int, int], ...]   # (size, stride) innermost first, for broadcasting
    vec: RmsKernel
    scalar: RmsKernel
    y_unq: str = ""        # fp8 y: the type y is rounded to first (the unquantized kernel's y)
    quant: tuple[Fp8Cvt, ...] = ()   # ... and the float32 -> y conversion (lower/gpu/fp8.py)

    @property
    def kernels(self) -> tuple[RmsKernel, ...]:
        return (self.vec, self.scalar)


def rms_cfg(p: RmsNormPlan, param: type[Param] = Param) -> RmsCfg:
    stash = p.stash.name
    direct = tuple(p.padded_scale_shape) == tuple(p.norm_shape)
    dims = tuple((n, s) for n, s in zip(reversed(p.norm_shape), reversed(p.scale_strides)))
    params = rms_params(p, param)
    return RmsCfg(
        plan=p, x=p.x.name, scale=p.scale.name, y=p.y.name, stash=stash, product=p.product.name,
        epsilon=p.epsilon_stash, scale_direct=direct, scale_dims=dims,
        vec=gpu.rms_kernel(p, f"{p.name}_vec", gpu.rms_vector_width(p), params),
        scalar=gpu.rms_kernel(p, f"{p.name}_scalar", 1, params),
        y_unq=p.y_unquantized.name if p.quant_scale else "", quant=conversions("f32", p.y))


# The render configuration of each operator kind (the plan's `.kind` word).
CONFIGS = {"rope": rope_cfg, "rmsnorm": rms_cfg}
