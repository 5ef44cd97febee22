"""Stage 4: every numeric decision, made once in Python: pair maps, frequency tables, constants.

Backends render a plan; they never recompute anything here.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Union

import numpy as np

from ropegen import exact, ir
from ropegen.spec.diagnostics import Diagnostic, SpecError
from ropegen.ir.dtypes import DTYPES, DType


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
class TensorPlan:
    """How an input maps to the canonical view [batch, seq, heads, unit] (tokens: batch = 1)."""

    name: str
    dtype: DType
    shape: tuple[ir.Size, ...]     # declared memory shape, symbols unresolved
    rank: int
    heads: int | None              # heads in rotation units (head_dim / unit per real head)
    real_heads: int | None
    unit_split: int                # rotation units per real head
    perm: tuple[int, ...] | None   # axes of the un-merged shape in canonical order (b, s, h, d)
    unmerged: tuple[ir.Size, ...] | None   # shape with a merged (heads, head_dim) axis split


@dataclass(frozen=True)
class StreamPlan:
    out: str
    src: str
    rotate: bool


@dataclass(frozen=True)
class ExactAngles:
    """theta[c] = p * inv_freq[c] (/ freq_factors[c]) in float64; cos/sin scaled by magnitude."""

    inv_freq: tuple[float, ...]
    magnitude: float
    freq_factors: str | None


@dataclass(frozen=True)
class GgmlAngles:
    """ggml's float32 numerics: theta_0 = p, theta_{c+1} = theta_c * theta_scale (all float32),
    theta_e = theta / ff[c], theta_i = freq_scale * theta_e, theta = theta_i*one_minus_ramp[c]
    + theta_e*ramp[c] when yarn, cos/sin multiplied by mscale (float32)."""

    theta_scale: float
    freq_scale: float
    ramp: tuple[float, ...]
    one_minus_ramp: tuple[float, ...]
    yarn: bool
    mscale: float
    freq_factors: str | None
    corr_dims: tuple[float, float]


@dataclass(frozen=True)
class TableAnglesPlan:
    cos: str
    sin: str
    dtype: DType
    per_token: bool                # rows are tokens (no positions); else rows are positions
    width: int


AnglesPlan = Union[ExactAngles, GgmlAngles, TableAnglesPlan]


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


@dataclass(frozen=True)
class RmsNormPlan:
    kind = "rmsnorm"
    name: str
    spec_sha256: str
    inputs: tuple[TensorPlan, ...]
    out: str
    x: DType
    scale: DType
    y: DType
    stash: DType
    product: DType                 # type of the scale multiply
    padded_scale_shape: tuple[int, ...]   # scale shape left-padded with 1s to the normalized rank
    epsilon_stash: float           # epsilon rounded to the stash type, as stage one adds it
    axis: int
    rank: int
    norm_size: int                 # elements per normalized row
    norm_shape: tuple[int, ...]
    scale_shape: tuple[int, ...]   # scale broadcast to norm_shape is read with these strides
    scale_strides: tuple[int, ...]
    epsilon: float
    ir: ir.RmsNormOp

    @property
    def last_axis(self) -> int:
        return self.rank - 1


Plan = Union[RopePlan, RmsNormPlan]


def plan_spec(spec: ir.Spec) -> tuple[Plan, ...]:
    return tuple(plan_operator(op, spec.sha256) for op in spec.operators)


def plan_operator(op: ir.Operator, sha: str) -> Plan:
    """The plan of one checked operator; a constant that overflows its type is a spec error (C029)."""
    with np.errstate(all="ignore"):   # overflow is reported as a diagnostic, not a warning
        plan = _plan_rope(op, sha) if isinstance(op, ir.RopeOp) else _plan_rms(op, sha)
        _check_finite(plan)
    return plan


def _check_finite(plan: Plan) -> None:
    values: list[float] = []
    if isinstance(plan, RmsNormPlan):
        values.append(float(plan.stash.np_dtype.type(plan.epsilon)))
    elif isinstance(plan.angles, ExactAngles):
        values += [*plan.angles.inv_freq, plan.angles.magnitude, float(np.float32(plan.angles.magnitude))]
    elif isinstance(plan.angles, GgmlAngles):
        values += [plan.angles.theta_scale, plan.angles.freq_scale, plan.angles.mscale, *plan.angles.ramp]
    bad = [v for v in values if not math.isfinite(v)]
    if bad:
        raise SpecError([Diagnostic("C029", f"operator '{plan.name}': a planned constant overflows its type "
                                    f"({bad[0]!r})", plan.ir.loc,
                                    "check epsilon, magnitude, base and scaling factors")])


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


# ---------------------------------------------------------------------------------------------
# frequencies

def base_inv_freq(base: float, dim: int, n: int) -> list[exact.Real]:
    """inv_c = base^(-2c/dim), c < n, at high precision (rounded by the caller, once)."""
    return [exact.power(base, -2 * c, dim) for c in range(n)]


def llama3_inv_freq(inv: list[exact.Real], s: ir.Llama3Scaling) -> list[exact.Real]:
    """Llama-3.1 wavelength bands (HF `_compute_llama3_parameters`), in exact arithmetic."""
    factor, lo_f, hi_f = exact.real(s.factor), exact.real(s.low_freq_factor), exact.real(s.high_freq_factor)
    old = exact.real(s.original_max_positions)
    lo_wl, hi_wl = old / lo_f, old / hi_f
    out = []
    for f in inv:
        w = 2 * exact.pi() / f
        if w < hi_wl:
            out.append(f)
        elif w > lo_wl:
            out.append(f / factor)
        else:
            sigma = 0 if hi_f == lo_f else (old / w - lo_f) / (hi_f - lo_f)
            out.append((1 - sigma) * f / factor + sigma * f)
    return out


def ggml_corr_dims(n_dims: int, n_ctx_orig: int, base: float, beta_fast: float,
                   beta_slow: float) -> tuple[float, float]:
    """ggml_rope_yarn_corr_dims in float32 as ggml writes it, with logf correctly rounded."""
    f32 = np.float32
    pi = f32(np.pi)

    def corr_dim(n_rot: float) -> np.float32:
        num = f32(n_dims) * exact.logf(f32(n_ctx_orig) / (f32(n_rot) * f32(2) * pi))
        return f32(num / (f32(2) * exact.logf(f32(base))))

    start = np.floor(corr_dim(beta_fast))
    end = np.ceil(corr_dim(beta_slow))
    return float(max(f32(0), start)), float(min(f32(n_dims - 1), end))


def ggml_theta_scale(base: float, n_dims: int) -> float:
    """powf(base, -2.0f/n_dims), correctly rounded (glibc's powf is; numpy's float32 power is not)."""
    return float(exact.powf(np.float32(base), np.float32(-2.0) / np.float32(n_dims)))


def ggml_ramp(low: float, high: float, n: int, ext_factor: float) -> np.ndarray:
    """rope_yarn_ramp(low, high, 2c) * ext_factor in float32, for c < n (ggml's i0/2 == c)."""
    f32 = np.float32
    c = np.arange(n).astype(f32)
    y = (c - f32(low)) / np.maximum(f32(0.001), f32(high) - f32(low))
    ramp = f32(1) - np.minimum(f32(1), np.maximum(f32(0), y))
    return (ramp * f32(ext_factor)).astype(f32)


def _ggml_mscale(attn: float, freq_scale: float, yarn: bool) -> float:
    f32 = np.float32
    m = f32(attn)
    if yarn:
        m = f32(m * (f32(1) + f32(0.1) * exact.logf(f32(1) / f32(freq_scale))))
    return float(m)


def _exact_yarn(inv: list[exact.Real], s: ir.GgmlYarnScaling, dim: int, base: float
                ) -> tuple[list[exact.Real], exact.Real]:
    """ggml's YaRN blend as real arithmetic: inv * (fs (1 - ramp) + ramp), and its magnitude factor."""
    low, high = ggml_corr_dims(dim, s.n_ctx_orig, base, s.beta_fast, s.beta_slow)
    low_r, span = exact.real(low), max(exact.real("0.001"), exact.real(high) - exact.real(low))
    fs, ext = exact.real(s.freq_scale), exact.real(s.ext_factor)
    out = []
    for c, f in enumerate(inv):
        ramp = (1 - min(exact.real(1), max(exact.real(0), (c - low_r) / span))) * ext
        out.append(f * (fs * (1 - ramp) + ramp))
    gain = exact.real(s.attn_factor)
    if s.ext_factor != 0:
        gain *= 1 + exact.real("0.1") * exact.log(1 / fs)
    return out, gain


def _angles(op: ir.RopeOp, n_cols: int) -> AnglesPlan:
    a = op.angles
    if isinstance(a, ir.TableAngles):
        cos = op.tensor(a.cos)
        return TableAnglesPlan(a.cos, a.sin, cos.dtype, op.positions.kind is ir.PositionKind.TOKEN,
                               int(cos.axes[-1].size))
    # the frequencies of one rotated half (glm2d) or of the whole rotary extent
    dim = op.rotary_dim // 2 if op.pairing.kind is ir.PairKind.GLM2D else op.rotary_dim
    s = a.scaling
    if op.numerics is ir.AngleNumerics.GGML:
        theta_scale = ggml_theta_scale(a.base, dim)
        if isinstance(s, ir.GgmlYarnScaling):
            fs, ext, attn = s.freq_scale, s.ext_factor, s.attn_factor
            corr = ggml_corr_dims(dim, s.n_ctx_orig, a.base, s.beta_fast, s.beta_slow)
        else:
            fs, ext, attn, corr = 1.0, 0.0, 1.0, (0.0, 0.0)
        ramp = ggml_ramp(corr[0], corr[1], n_cols, ext)
        yarn = ext != 0.0
        mscale = float(np.float32(_ggml_mscale(attn, fs, yarn)) * np.float32(a.magnitude))
        return GgmlAngles(theta_scale, float(np.float32(fs)), tuple(float(x) for x in ramp),
                          tuple(float(np.float32(1) - x) for x in ramp), yarn, mscale, a.freq_factors, corr)
    inv = base_inv_freq(a.base, dim, n_cols)
    magnitude = exact.real(a.magnitude)
    if isinstance(s, ir.LinearScaling):
        inv = [f / exact.real(s.factor) for f in inv]
    elif isinstance(s, ir.Llama3Scaling):
        inv = llama3_inv_freq(inv, s)
    elif isinstance(s, ir.GgmlYarnScaling):
        inv, gain = _exact_yarn(inv, s, dim, a.base)
        magnitude *= gain
    return ExactAngles(tuple(exact.f64(f) for f in inv), exact.f64(magnitude), a.freq_factors)


# ---------------------------------------------------------------------------------------------

def _tensor_plan(t: ir.Tensor, unit: int | None) -> TensorPlan:
    shape = tuple(a.size for a in t.axes)
    heads_dim = t.role_dim(ir.Role.HEADS)
    if heads_dim is None:
        return TensorPlan(t.name, t.dtype, shape, len(shape), None, None, 1, None, None)
    unmerged = tuple(d.size for d in t.dims)
    order = [ir.Role.BATCH, ir.Role.SEQ, ir.Role.TOKENS, ir.Role.HEADS, ir.Role.HEAD_DIM]
    roles = [d.role for d in t.dims]
    perm = tuple(roles.index(r) for r in order if r in roles)
    head_dim = t.role_dim(ir.Role.HEAD_DIM).size
    split = head_dim // unit
    return TensorPlan(t.name, t.dtype, shape, len(shape), heads_dim.size * split, heads_dim.size, split,
                      perm, unmerged)


def _plan_rope(op: ir.RopeOp, sha: str) -> RopePlan:
    first = op.rotated[0]
    head_dim = int(first.role_dim(ir.Role.HEAD_DIM).size)
    if op.pairing.kind is ir.PairKind.BLOCK:
        unit = int(op.tensor(op.angles.cos).axes[-1].size)
        rotary = unit
    else:
        unit = head_dim
        rotary = op.rotary_dim
    width = int(op.tensor(op.angles.cos).axes[-1].size) if isinstance(op.angles, ir.TableAngles) else None
    blocks, n_cols = _pairing_blocks(op.pairing, unit, rotary, width)
    passthrough = ((rotary, unit),) if rotary < unit else ()
    rotated_names = {o.source for o in op.outputs}
    inputs = tuple(_tensor_plan(t, unit if t.name in rotated_names else None) for t in op.inputs)
    storage = first.dtype
    if op.compute is ir.Compute.STORAGE:
        compute = storage
    else:
        compute = DTYPES[op.compute.value]
    token_layout = "t" if first.role_dim(ir.Role.TOKENS) is not None else "bs"
    token_order = "sb" if [d.role for d in first.token_dims] == [ir.Role.SEQ, ir.Role.BATCH] else "bs"
    pos_dtype = None
    if op.positions.kind is ir.PositionKind.IDS:
        pos_dtype = op.tensor(op.positions.ids).dtype
    return RopePlan(
        name=op.name, spec_sha256=sha, inputs=inputs,
        streams=tuple(StreamPlan(o.name, o.source, o.rotate) for o in op.outputs),
        token_layout=token_layout, token_order=token_order, storage=storage, compute=compute,
        compute_storage_rounding=op.compute is ir.Compute.STORAGE,
        unit=unit, head_dim=head_dim, rotary_dim=rotary, blocks=blocks, passthrough=passthrough,
        n_cols=n_cols, n_streams=op.positions.streams, positions=op.positions, position_dtype=pos_dtype,
        sequences=op.sequences, angles=_angles(op, n_cols),
        sin_sign=-1 if op.direction is ir.Direction.BACKWARD else 1,
        trig_fast=op.trig is ir.Trig.FAST, ir=op)


def _plan_rms(op: ir.RmsNormOp, sha: str) -> RmsNormPlan:
    x, scale = op.x, op.scale
    norm_shape = tuple(int(a.size) for a in x.axes[op.axis:])
    sshape = tuple(int(a.size) for a in scale.axes)
    padded = (1,) * (len(norm_shape) - len(sshape)) + sshape
    # element strides of the (contiguous) scale, zero along broadcast axes
    strides = []
    acc = 1
    for n in reversed(padded):
        strides.append(0 if n == 1 else acc)
        acc *= n
    strides.reverse()
    # the scale multiply runs in float64 when either operand is float64, else in float32
    product = DTYPES["f64"] if "f64" in (x.dtype.name, scale.dtype.name) else DTYPES["f32"]
    return RmsNormPlan(
        name=op.name, spec_sha256=sha,
        inputs=(_tensor_plan(x, None), _tensor_plan(scale, None)), out=op.output,
        x=x.dtype, scale=scale.dtype, y=scale.dtype, stash=op.stash, product=product,
        padded_scale_shape=padded, epsilon_stash=float(op.stash.np_dtype.type(op.epsilon)),
        axis=op.axis, rank=len(x.axes),
        norm_size=int(np.prod(norm_shape)), norm_shape=norm_shape, scale_shape=sshape,
        scale_strides=tuple(strides), epsilon=op.epsilon, ir=op)
