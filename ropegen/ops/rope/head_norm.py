"""The per-head RMSNorm a rope output may apply before it rotates, `rotate(rmsnorm(x, weight = W,
epsilon = E, weight_offset = O, cast = C))` (Qwen3 and Gemma 3 q/k norms, fused as vLLM's and
TensorRT-LLM's fused QK-norm + RoPE kernels are): its check and its plan. The numerics are rmsnorm's
over each head's head_dim elements (ops/rmsnorm/reference.py `normalize`), and the normalized head is
rounded to x's type, as the model stores it, before the rotation reads it."""
from __future__ import annotations

from dataclasses import dataclass

from ropegen import ir
from ropegen.ir.dtypes import DTYPES, DType
from ropegen.ops.rmsnorm.check import CASTS
from ropegen.spec import ast as A

ARGS = ("x", "weight", "epsilon", "weight_offset", "cast")


def check_norm(cx, v: A.Call) -> tuple[ir.Tensor, ir.HeadNorm]:
    """(the normalized input, its HeadNorm) of an `rmsnorm(...)` inside rotate(...)."""
    args = cx.call_args(v, ARGS, ("x", "weight"), positional=("x",))
    x = cx.ref(args["x"], "the normalized tensor")
    w = cx.ref(args["weight"], "weight")
    head_dim, heads = x.role_dim(ir.Role.HEAD_DIM), x.role_dim(ir.Role.HEADS)
    shape = [a.size for a in w.axes]
    over_heads = False
    if head_dim is not None and heads is not None:
        over_heads = shape == [heads.size, head_dim.size]
        if not w.dtype.is_float or (shape != [head_dim.size] and not over_heads):
            cx.fail("C018", f"rmsnorm weight '{w.name}' must be a float tensor [{head_dim.size}] (a norm over "
                    f"each head of '{x.name}') or [{heads.size}, {head_dim.size}] (over all its heads of a "
                    "token, as OLMo 2)", w.loc)
    eps = cx.number(args["epsilon"], "epsilon", nonneg=True) if "epsilon" in args else 1e-6
    offset = float(cx.number(args["weight_offset"], "weight_offset")) if "weight_offset" in args else 0.0
    cast = cx.word(args["cast"], "cast", CASTS) if "cast" in args else "before_scale"
    return x, ir.HeadNorm(w.name, eps, offset, cast, over_heads)


@dataclass(frozen=True)
class HeadNormPlan:
    """The per-head norm of one rope stream, every number in the type it is used in."""

    weight: str
    weight_dtype: DType
    stash: DType            # stage one: f32 (f64 for f64 tensors)
    product: DType          # the weight multiply: f64 when x or the weight is f64, else f32
    epsilon_stash: float    # epsilon as the stash type's value
    weight_offset: float    # as the product type's value; 0: none
    cast: str               # before_scale | after_scale
    over_heads: bool = False     # one norm over all of a token's heads of the stream (OLMo 2), not per head


def plan_norm(op: ir.RopeOp, out: ir.RopeOutput) -> HeadNormPlan | None:
    n = out.norm
    if n is None:
        return None
    x, w = op.tensor(out.source), op.tensor(n.weight)
    wide = "f64" in (x.dtype.name, w.dtype.name)
    stash = DTYPES["f64" if x.dtype.name == "f64" else "f32"]
    product = DTYPES["f64" if wide else "f32"]
    return HeadNormPlan(n.weight, w.dtype, stash, product, float(stash.np_dtype.type(n.epsilon)),
                        float(product.np_dtype.type(n.weight_offset)), n.cast, n.over_heads)


def norm_words(n: ir.HeadNorm | None) -> str:
    """The norm in words (explain)."""
    if n is None:
        return ""
    scale = f"({n.weight_offset!r} + {n.weight})" if n.weight_offset else n.weight
    return (f" after rmsnorm over {'all heads of a token' if n.over_heads else 'head_dim'} (epsilon {n.epsilon!r}, "
            f"* {scale}, cast {n.cast}), stored in its type")
