"""`ropegen explain` for an RMSNorm plan."""
from __future__ import annotations

from ropegen.ops.explain import number, tensor
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


def facts(p: RmsNormPlan, lengths: tuple[int, ...] = ()) -> dict:
    """What explain prints, as data (`ropegen explain --json`); `lengths` change nothing here."""
    return {
        "name": p.name,
        "inputs": [tensor(t) for t in p.inputs],
        "x": p.x_name, "scale": p.scale_name,
        "output": {"name": p.out, "dtype": p.y.name},
        "residual": None if not p.residual else {
            "input": p.residual, "sum_output": p.sum_output, "add_in": p.stash.name, "stored_as": p.x.name,
            "normalized": "stored" if p.residual_add == "storage" else "unrounded"},
        "axis": p.axis, "rank": p.rank, "norm_size": p.norm_size, "norm_shape": list(p.norm_shape),
        "scale_shape": list(p.scale_shape),
        "epsilon": number(p.epsilon), "epsilon_stash": number(p.stash.np_dtype.type(p.epsilon_stash)),
        "weight_offset": number(p.product.np_dtype.type(p.weight_offset)),
        "cast": p.cast,
        "dtypes": {"x": p.x.name, "scale": p.scale.name, "y": p.y.name, "stash": p.stash.name,
                   "product": p.product.name,
                   "y_unquantized": (p.y_unquantized or p.y).name},
        "quantize": None if not p.quant_scale else {"scale": p.quant_scale, "max_finite": number(p.y.max_finite)},
    }
