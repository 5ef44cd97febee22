"""`ropegen explain` for an RMSNorm plan."""
from __future__ import annotations

from ropegen.ops.rmsnorm.plan import RmsNormPlan


def _shape(t) -> str:
    return f"{t.dtype.name}[{', '.join(map(str, t.shape))}]"


def explain(p: RmsNormPlan, lengths: tuple[int, ...] = ()) -> str:
    ins = ", ".join(f"{t.name}: {_shape(t)}" for t in p.inputs)
    v = p.x_name
    lines = [f"rmsnorm {p.name}", f"  inputs     {ins}"]
    if p.residual:
        lines.append(f"  residual   {p.sum_output} = {p.x_name} + {p.residual} in {p.stash.name}, stored as {p.x.name}; "
                     + (f"the stored {p.x.name} value is normalized" if p.residual_add == "storage"
                        else f"the unrounded {p.stash.name} sum is normalized"))
        v = p.sum_output
    scale = f"({p.weight_offset!r} + {p.scale_name})" if p.weight_offset else p.scale_name
    lines += [
        f"  output     {p.out}: {p.y.name}, shape of {p.x_name}",
        f"  normalize  axes {p.axis}..{p.rank - 1} -> rows of {p.norm_size} elements {list(p.norm_shape)}",
        f"  epsilon    {p.epsilon!r}",
        f"  stage one  in {p.stash.name}: {v} / sqrt(mean({v}^2) + epsilon)"
        + (f", rounded to {p.x.name} (cast before the scale)" if p.cast == "before_scale"
           else " (not rounded: cast after the scale)"),
        f"  stage two  * {scale} in {p.product.name} (broadcast {list(p.scale_shape)} -> {list(p.norm_shape)}), "
        f"stored as {p.y_unquantized.name}" + (f", then * {p.quant_scale} in f32, rounded to {p.y.name} "
                                                f"(nearest even, saturated to +-{p.y.max_finite:g})"
                                                if p.quant_scale else ""),
    ]
    return "\n".join(lines)
