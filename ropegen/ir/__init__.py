"""Stage 3: the checked operator, as frozen dataclasses and enums (no backend strings here).

The records of rope's scaling forms (NoScaling, LinearScaling, Llama3Scaling, GgmlYarnScaling, and
their union Scaling) are defined next to their rows in ops/rope/forms/scaling.py, so that a new
scaling form is written in one place; they are reachable here under the same names
(`ir.LinearScaling`).
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Union

from ropegen.spec.diagnostics import Loc
from ropegen.ir.dtypes import DType

if TYPE_CHECKING:
    from ropegen.ops.rope.forms import Scaling


class Role(Enum):
    BATCH = "batch"
    SEQ = "seq"
    TOKENS = "tokens"
    HEADS = "heads"
    HEAD_DIM = "head_dim"


TOKEN_ROLES = (Role.BATCH, Role.SEQ, Role.TOKENS)

Size = Union[int, str]   # a fixed extent, or a symbol bound when the operator runs


@dataclass(frozen=True)
class Dim:
    size: Size
    role: Role | None = None


@dataclass(frozen=True)
class Axis:
    """One memory axis; more than one part means dims merged row-major into one axis."""

    parts: tuple[Dim, ...]

    @property
    def size(self) -> Size:
        if len(self.parts) == 1:
            return self.parts[0].size
        total = 1
        for p in self.parts:
            assert isinstance(p.size, int)
            total *= p.size
        return total


@dataclass(frozen=True)
class Tensor:
    name: str
    dtype: DType
    axes: tuple[Axis, ...]
    loc: Loc

    @property
    def dims(self) -> tuple[Dim, ...]:
        return tuple(p for a in self.axes for p in a.parts)

    def role_dim(self, role: Role) -> Dim | None:
        for d in self.dims:
            if d.role is role:
                return d
        return None

    @property
    def token_dims(self) -> tuple[Dim, ...]:
        return tuple(d for d in self.dims if d.role in TOKEN_ROLES)


class PairKind(Enum):
    NEOX = "neox"        # (j, j + r/2)
    GPTJ = "gptj"        # (2j, 2j + 1)
    BLOCK = "block"      # ATB rotaryCoeff: stride W/c blocks, per-element cos/sin
    GLM2D = "glm2d"      # two halves, each paired by `inner`, each with its own position stream


@dataclass(frozen=True)
class Pairing:
    kind: PairKind
    coeff: int | None = None
    inner: PairKind | None = None


class PositionKind(Enum):
    TOKEN = "token"              # no positions: tables hold one row per token
    IDS = "ids"                  # an integer tensor of positions, one per token
    IN_SEQUENCE = "in_sequence"  # index of the token inside its packed sequence (ATB cosFormat=1)
    ARANGE = "arange"            # start + s - pad[b]
    GLM2D = "glm2d"              # the two GLM-1 position streams (ppl Rotary2DPositionEmbedding)
    MROPE = "mrope"              # multimodal sections: one position stream per section (Qwen2/3-VL)


Scalar = Union[int, str]   # a literal, or the name of a rank-0 integer input


@dataclass(frozen=True)
class Positions:
    kind: PositionKind
    ids: str | None = None
    start: Scalar = 0
    pad: str | None = None
    first_seqlen: Scalar | None = None
    streams: int = 1     # position streams, each rotating its own part of the head (glm2d: two halves)
    sections: tuple[int, ...] = ()   # mrope: pairs per stream (temporal, height, width), in pair order
    interleaved: bool = False        # mrope: streams take pairs round-robin (Qwen3-VL), else in runs
    offsets: str | None = None       # in_sequence: an input [sequences], the position of each one's first token


@dataclass(frozen=True)
class TableAngles:
    cos: str
    sin: str
    sin_column: int = 0    # where sin starts in its tensor: 0, or the half width of a fused cos_sin cache


@dataclass(frozen=True)
class ComputedAngles:
    base: float
    scaling: Scaling     # a scaling form's record (ops/rope/forms/scaling.py)
    freq_factors: str | None
    magnitude: float


Angles = Union[TableAngles, ComputedAngles]


class Direction(Enum):
    FORWARD = "forward"
    BACKWARD = "backward"   # the inverse rotation (sin -> -sin), ggml_rope_ext_back


class Compute(Enum):
    F32 = "f32"
    F64 = "f64"
    STORAGE = "storage"     # every product and sum rounded to the storage type (ATB golden)


class AngleNumerics(Enum):
    EXACT = "exact"   # angle p*inv in float64, reduced mod 2*pi, then rounded
    GGML = "ggml"     # ggml's float32 running product theta *= theta_scale per pair


class Trig(Enum):
    ACCURATE = "accurate"
    FAST = "fast"


@dataclass(frozen=True)
class HeadNorm:
    """`rotate(rmsnorm(x, weight = W, ...))`: each head of x normalized over head_dim before it is
    rotated (Qwen3 / Gemma 3 q and k norms), the result rounded to x's type as the model stores it;
    the numerics are rmsnorm's (ops/rmsnorm/reference.py `normalize`), stash f32 (f64 for f64 x)."""

    weight: str
    epsilon: float
    weight_offset: float = 0.0     # Gemma 3: 1
    cast: str = "before_scale"     # as rmsnorm's `cast`
    over_heads: bool = False       # one norm over all heads of a token (OLMo 2: weight [heads, head_dim])


@dataclass(frozen=True)
class RopeOutput:
    name: str
    source: str
    rotate: bool      # False: a pass-through copy (ppl bypass_key)
    norm: HeadNorm | None = None   # the per-head RMSNorm applied before the rotation


@dataclass(frozen=True)
class RopeOp:
    name: str
    inputs: tuple[Tensor, ...]
    outputs: tuple[RopeOutput, ...]
    pairing: Pairing
    rotary_dim: int
    positions: Positions
    angles: Angles
    sequences: str | None
    direction: Direction
    compute: Compute
    numerics: AngleNumerics
    trig: Trig
    loc: Loc
    rotary_start: int = 0        # first rotated element of a head (a window [start, start + rotary_dim))
    sequences_indptr: bool = False   # `sequences` holds offsets [N + 1] (FlashInfer's indptr), not lengths [N]
    out_dtype: DType | None = None   # fp8 outputs (ops/quant.py); None: each output has its source's type
    quant_scales: tuple[str, ...] = ()   # fp8: the f32 [1] or [heads] scale input of each output, in order

    kind = "rope"

    def tensor(self, name: str) -> Tensor:
        return next(t for t in self.inputs if t.name == name)

    @property
    def rotated(self) -> tuple[Tensor, ...]:
        return tuple(self.tensor(o.source) for o in self.outputs)

    @property
    def output_names(self) -> tuple[str, ...]:
        return tuple(o.name for o in self.outputs)


@dataclass(frozen=True)
class RmsNormOp:
    """y = rmsnorm(x) * (weight_offset + scale); with a residual, h = x + residual is what is
    normalized and a second output. `inputs` are in declaration order: x and scale are the first and
    second that are not the residual."""

    name: str
    inputs: tuple[Tensor, ...]
    output: str
    axis: int                     # non-negative first normalized axis
    epsilon: float
    stash: DType
    loc: Loc
    residual: str | None = None   # the input added to x before normalizing
    sum_output: str | None = None     # h = x + residual (residual only)
    residual_add: str = "storage"     # storage: h rounded to x's type is normalized; stash: the unrounded sum
    weight_offset: float = 0.0        # Gemma's (1 + w): 1
    cast: str = "before_scale"        # before_scale: normalized rounded to x's type, then * w (Llama, ONNX);
    #                                   after_scale: * w in the product type, rounded once (Gemma)
    y_dtype: DType | None = None      # None: the scale's type (before_scale) or x's (after_scale)
    quant_scale: str | None = None    # fp8 y: the f32[1] input y is multiplied by (ops/quant.py)

    kind = "rmsnorm"

    @property
    def output_names(self) -> tuple[str, ...]:
        return (self.output,) + ((self.sum_output,) if self.sum_output else ())

    @property
    def _plain(self) -> tuple[Tensor, ...]:
        return tuple(t for t in self.inputs if t.name not in (self.residual, self.quant_scale))

    @property
    def x(self) -> Tensor:
        return self._plain[0]

    @property
    def scale(self) -> Tensor:
        return self._plain[1]

    @property
    def residual_tensor(self) -> Tensor | None:
        return next((t for t in self.inputs if t.name == self.residual), None)

    @property
    def y(self) -> DType:
        return self.y_dtype if self.y_dtype is not None else self.y_unquantized

    @property
    def y_unquantized(self) -> DType:
        """What y would be stored as without quantization: an fp8 y quantizes this rounded value."""
        if self.y_dtype is not None and not self.y_dtype.quantized:
            return self.y_dtype
        return self.scale.dtype if self.cast == "before_scale" else self.x.dtype


Operator = Union[RopeOp, RmsNormOp]


@dataclass(frozen=True)
class Spec:
    file: str
    sha256: str
    operators: tuple[Operator, ...]
    warnings: tuple = ()      # Diagnostics of severity "warning": reported, but the spec checks


def __getattr__(name: str):
    # the scaling records, loaded on first use: the forms import this module
    forms = importlib.import_module("ropegen.ops.rope.forms")
    if name in forms.IR_NAMES:
        return getattr(forms, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
