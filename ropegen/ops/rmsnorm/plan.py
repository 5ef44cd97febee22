"""The RMSNorm plan: stage types, the scale's broadcast strides, epsilon in the stash type, and the
family's settings (residual add, weight offset, cast order, output type) as plain words and values."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ropegen import ir
from ropegen.ir.dtypes import DTYPES, DType
from ropegen.ops.common import TensorPlan, tensor_plan


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
    x_name: str = ""               # the inputs by role (plan.inputs keeps the declaration order)
    scale_name: str = ""
    residual: str | None = None    # h = x + residual is normalized, and written to `sum_output`
    sum_output: str | None = None
    residual_add: str = "storage"  # storage: the sum rounded to x's type is normalized; stash: unrounded
    weight_offset: float = 0.0     # added to the scale in the product type (Gemma: 1), as that type's value
    cast: str = "before_scale"     # before_scale: normalized rounded to x's type, then * scale;
    #                                after_scale: normalized * scale in the product type, rounded once
    quant_scale: str | None = None     # fp8 y: y_unquantized's value * quant_scale, saturated (ops/quant.py)
    y_unquantized: DType | None = None  # the type y is rounded to before it is quantized (else y)

    @property
    def last_axis(self) -> int:
        return self.rank - 1

    @property
    def outputs(self) -> tuple[str, ...]:
        return (self.out,) + ((self.sum_output,) if self.sum_output else ())


def constants(plan: RmsNormPlan) -> list[float]:
    return [float(plan.stash.np_dtype.type(plan.epsilon))]


def plan(op: ir.RmsNormOp, sha: str) -> RmsNormPlan:
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
        inputs=tuple(tensor_plan(t, None) for t in op.inputs), out=op.output,
        x=x.dtype, scale=scale.dtype, y=op.y, stash=op.stash, product=product,
        padded_scale_shape=padded, epsilon_stash=float(op.stash.np_dtype.type(op.epsilon)),
        axis=op.axis, rank=len(x.axes),
        norm_size=int(np.prod(norm_shape)), norm_shape=norm_shape, scale_shape=sshape,
        scale_strides=tuple(strides), epsilon=op.epsilon, ir=op, x_name=x.name, scale_name=scale.name,
        residual=op.residual, sum_output=op.sum_output, residual_add=op.residual_add,
        weight_offset=float(product.np_dtype.type(op.weight_offset)), cast=op.cast,
        quant_scale=op.quant_scale, y_unquantized=op.y_unquantized)
