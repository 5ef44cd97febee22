"""The RMSNorm plan: stage types, the scale's broadcast strides and epsilon in the stash type."""
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

    @property
    def last_axis(self) -> int:
        return self.rank - 1


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
        inputs=(tensor_plan(x, None), tensor_plan(scale, None)), out=op.output,
        x=x.dtype, scale=scale.dtype, y=scale.dtype, stash=op.stash, product=product,
        padded_scale_shape=padded, epsilon_stash=float(op.stash.np_dtype.type(op.epsilon)),
        axis=op.axis, rank=len(x.axes),
        norm_size=int(np.prod(norm_shape)), norm_shape=norm_shape, scale_shape=sshape,
        scale_strides=tuple(strides), epsilon=op.epsilon, ir=op)
